package template

import (
	"errors"
	"fmt"
	"time"
)

// Variables is what nomadVar, nomadVarExists and nomadVarList read: the
// Nomad Variables of the job's namespace that the task may read (Nomad's
// default rule: nomad/jobs/<job>, .../<group>, .../<group>/<task>).
type Variables interface {
	// Var returns a variable's items, ok false when there is none; an
	// error when the task may not read it.
	Var(path string) (items map[string]string, ok bool, err error)
	// List returns the variables under prefix that the task may read,
	// by path.
	List(prefix string) ([]VarMeta, error)
}

// VarMeta is one entry of nomadVarList, with consul-template's fields.
type VarMeta struct {
	Namespace, Path          string
	CreateIndex, ModifyIndex uint64
	CreateTime, ModifyTime   time.Time
}

// nomadVar returns a variable's items (a map: {{ .key }}, range). A
// variable that does not exist is an error: Nomad would wait for it, and
// a template rendered before the task starts cannot wait.
func (r *render) nomadVar(path string) (map[string]string, error) {
	r.usesVars = true
	if r.ctx.Vars == nil {
		return nil, fmt.Errorf("nomadVar %q: no variables to read", path)
	}
	items, ok, err := r.ctx.Vars.Var(path)
	if err != nil {
		return nil, fmt.Errorf("nomadVar %q: %w", path, err)
	}
	if !ok {
		return nil, fmt.Errorf("nomadVar %q: no such variable (write it with `nomad var put %s k=v` before the task starts)", path, path)
	}
	return items, nil
}

func (r *render) nomadVarExists(path string) (bool, error) {
	r.usesVars = true
	if r.ctx.Vars == nil {
		return false, nil
	}
	_, ok, err := r.ctx.Vars.Var(path)
	if err != nil {
		return false, fmt.Errorf("nomadVarExists %q: %w", path, err)
	}
	return ok, nil
}

// nomadVarList lists the variables under a prefix (all the task may read
// without one).
func (r *render) nomadVarList(prefix ...string) ([]VarMeta, error) {
	r.usesVars = true
	if len(prefix) > 1 {
		return nil, errors.New("nomadVarList: want at most one prefix")
	}
	if r.ctx.Vars == nil {
		return nil, nil
	}
	p := ""
	if len(prefix) == 1 {
		p = prefix[0]
	}
	return r.ctx.Vars.List(p)
}
