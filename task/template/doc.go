// Package template renders Nomad's template blocks: Go's text/template
// with the function names of consul-template that make sense without
// Consul or Vault (env, file, timestamp, toJSON, split, ...), Nomad's
// native service lookups (nomadService, nomadServices), Nomad Variables
// (nomadVar, nomadVarExists, nomadVarList) and a subset of
// go-sockaddr's address helpers (sockaddr).
//
// Check finds, before anything runs, what cannot render on berth: a Consul
// or Vault function, a function Nomad denies by default
// (plugin, writeToFile) or one berth does not have, each at its line and
// column in the template. Render executes a template against a task's
// environment, its directory (the sandbox of file) and a catalog of
// services, and says which services it read so that the caller knows when
// to render it again.
//
// The package depends on the standard library only.
package template
