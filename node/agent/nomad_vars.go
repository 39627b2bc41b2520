package agent

import (
	"context"
	"errors"

	"github.com/berth/berth/node/nomadapi"
	"github.com/berth/berth/store"
)

// Nomad Variables in the node's store (package store), for the Nomad
// API and for templates (nomadVar).

func nomadVar(v *store.Variable) *nomadapi.Variable {
	return &nomadapi.Variable{
		Namespace: v.Namespace, Path: v.Path, Items: v.Items,
		CreateIndex: v.CreateIndex, ModifyIndex: v.ModifyIndex, CreateTime: v.CreateTime, ModifyTime: v.ModifyTime,
	}
}

// varErr makes a failed check-and-set nomadapi's conflict.
func varErr(err error) error {
	var ce *store.CASError
	if errors.As(err, &ce) {
		out := &nomadapi.VarConflictError{Err: err}
		if ce.Current != nil {
			out.Current = nomadVar(ce.Current)
		}
		return out
	}
	return toNomadErr(err)
}

func (b nomadBackend) ListVars(ctx context.Context, ns, prefix string) ([]*nomadapi.Variable, error) {
	l, err := b.a.node.Store.ListVariables(ctx, ns, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]*nomadapi.Variable, 0, len(l))
	for _, v := range l {
		out = append(out, nomadVar(v))
	}
	return out, nil
}

func (b nomadBackend) GetVar(ctx context.Context, ns, path string) (*nomadapi.Variable, error) {
	v, err := b.a.node.Store.GetVariable(ctx, ns, path)
	if err != nil {
		return nil, varErr(err)
	}
	return nomadVar(v), nil
}

func (b nomadBackend) PutVar(ctx context.Context, v *nomadapi.Variable, cas *uint64) (*nomadapi.Variable, error) {
	nv, err := b.a.node.Store.PutVariable(ctx, &store.Variable{Namespace: v.Namespace, Path: v.Path, Items: v.Items}, cas)
	if err != nil {
		return nil, varErr(err)
	}
	b.a.log.Info("variable written (nomad API)", "namespace", nv.Namespace, "path", nv.Path, "modify_index", nv.ModifyIndex)
	return nomadVar(nv), nil
}

func (b nomadBackend) DeleteVar(ctx context.Context, ns, path string, cas *uint64) error {
	if err := b.a.node.Store.DeleteVariable(ctx, ns, path, cas); err != nil {
		return varErr(err)
	}
	b.a.log.Info("variable deleted (nomad API)", "namespace", ns, "path", path)
	return nil
}
