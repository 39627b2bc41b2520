package api

import (
	"context"
	"net/http"
	"net/url"
	"time"
)

// Health of a service instance and status of a check, as Consul names
// them; "pending" is a check that has not run yet and has no
// initial_status.
const (
	CheckPassing  = "passing"
	CheckWarning  = "warning"
	CheckCritical = "critical"
	CheckPending  = "pending"
)

// ServiceStub is one line of GET /v1/services: a service of the node's
// native catalog (provider "nomad").
type ServiceStub struct {
	ServiceName string `json:"service_name"`
	Namespace   string `json:"namespace"`
	// Tags is the union of its instances' tags, sorted.
	Tags []string `json:"tags"`
	// Instances counts its registrations, Passing those whose health is
	// passing.
	Instances int `json:"instances"`
	Passing   int `json:"passing"`
}

// ServiceRegistration is one instance of a service: GET
// /v1/service/{name} lists them, and an Allocation carries its own.
type ServiceRegistration struct {
	// ID is Nomad's: _nomad-task-<alloc>-<task>-<service>-<port label>,
	// or with group-<group> for a group's service.
	ID          string            `json:"id"`
	ServiceName string            `json:"service_name"`
	Namespace   string            `json:"namespace"`
	NodeID      string            `json:"node_id,omitempty"`
	NodeName    string            `json:"node_name,omitempty"`
	Datacenter  string            `json:"datacenter,omitempty"`
	JobID       string            `json:"job_id"`
	AllocID     string            `json:"alloc_id"`
	Group       string            `json:"group"`
	Task        string            `json:"task,omitempty"` // empty for a group's service
	Address     string            `json:"address"`
	Port        int               `json:"port,omitempty"`
	Tags        []string          `json:"tags,omitempty"`
	Meta        map[string]string `json:"meta,omitempty"`
	// Health is the worst status of the checks that count (a check with
	// on_update "ignore" does not; "ignore_warnings" counts a warning as
	// passing); passing for an instance without checks.
	Health     string        `json:"health"`
	Checks     []CheckStatus `json:"checks,omitempty"`
	CreatedAt  time.Time     `json:"created_at"`
	ModifiedAt time.Time     `json:"modified_at"`
}

// CheckStatus is one check of a ServiceRegistration.
type CheckStatus struct {
	Name   string `json:"name"`
	Type   string `json:"type"`   // "http" or "tcp"
	Status string `json:"status"` // CheckPassing, ...
	// Output is what its last run said; Time is when that run started
	// (zero before the first).
	Output   string    `json:"output,omitempty"`
	Time     time.Time `json:"time,omitempty"`
	OnUpdate string    `json:"on_update,omitempty"`
}

// Services lists the node's native services.
func (c *Client) Services(ctx context.Context) ([]ServiceStub, error) {
	var r []ServiceStub
	_, err := c.call(ctx, http.MethodGet, "/v1/services", nil, &r)
	return r, err
}

// Service lists the instances of one service; none is a 404 error
// (IsNotFound).
func (c *Client) Service(ctx context.Context, name string) ([]ServiceRegistration, error) {
	var r []ServiceRegistration
	_, err := c.call(ctx, http.MethodGet, "/v1/service/"+url.PathEscape(name), nil, &r)
	return r, err
}
