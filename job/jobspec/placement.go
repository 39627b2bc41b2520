package jobspec

import (
	"errors"
	"fmt"
	"path"
	"slices"
	"strings"
)

// ErrPlacement is matched (errors.Is) by the error Placement returns: the
// job is valid, but this node cannot run it.
var ErrPlacement = errors.New("job cannot be placed on this node")

// PlacementError is one reason this node cannot run a job: an unmet
// constraint, a datacenter or node pool this node is not in.
type PlacementError struct {
	// Kind is PlaceConstraint, PlaceDatacenters or PlaceNodePool.
	Kind string
	// What names the rule: `constraint "${attr.kernel.name}" = "windows"`,
	// "datacenters", "node_pool".
	What string
	// Where is the block it is in: `job "j"`, `group "g" in job "j"`.
	Where string
	// Node is what this node has instead.
	Node string
	Pos  Pos
}

func (e *PlacementError) Error() string {
	return fmt.Sprintf("%s: %s in %s not met by this node: %s", e.Pos, e.What, e.Where, e.Node)
}

// Is makes errors.Is(err, ErrPlacement) true.
func (e *PlacementError) Is(target error) bool { return target == ErrPlacement }

// Kinds of placement rule.
const (
	PlaceConstraint  = "constraint"
	PlaceDatacenters = "datacenters"
	PlaceNodePool    = "node_pool"
)

// Unmet lists every placement rule of the job that node does not meet,
// in file order: job constraints, datacenters and node pool, then each
// group's constraints and its tasks'.
func (j *Job) Unmet(node NodeAttrs) []*PlacementError {
	var out []*PlacementError
	jw := fmt.Sprintf("job %q", j.ID)
	check := func(cs []Constraint, where string) {
		for _, c := range cs {
			if c.Operator == "distinct_hosts" || c.Operator == "distinct_property" {
				continue // a single node is always distinct
			}
			if ok, detail := checkConstraint(c, node); !ok {
				out = append(out, &PlacementError{Kind: PlaceConstraint, What: "constraint " + c.describe(), Where: where, Node: detail, Pos: c.Pos})
			}
		}
	}
	check(j.Constraints, jw)
	if dc, ok := node["node.datacenter"]; ok && !matchDatacenter(j.Datacenters, dc) {
		out = append(out, &PlacementError{Kind: PlaceDatacenters, What: fmt.Sprintf("datacenters %s", quoteList(j.Datacenters)), Where: jw,
			Node: fmt.Sprintf("this node is in datacenter %q", dc), Pos: j.Pos})
	}
	if pool := nodePool(node); j.NodePool != "" && j.NodePool != "all" && j.NodePool != pool {
		out = append(out, &PlacementError{Kind: PlaceNodePool, What: fmt.Sprintf("node_pool %q", j.NodePool), Where: jw,
			Node: fmt.Sprintf("this node is in node pool %q", pool), Pos: j.Pos})
	}
	for _, g := range j.Groups {
		gw := fmt.Sprintf("group %q", g.Name)
		check(g.Constraints, gw)
		for _, t := range g.Tasks {
			check(t.Constraints, fmt.Sprintf("task %q in %s", t.Name, gw))
		}
	}
	return out
}

// Placement returns nil if node can run the job, else a refusal naming
// the first rule it does not meet and what the node has (a
// *PlacementError, matching ErrPlacement). run and plan call it before
// creating anything.
//
// A datacenter list without this node's datacenter stays a warning (from
// Parse) and is not refused: berth's node is always in "dc1" for now, and
// real job files name their own datacenters (the seed job: "S10"), so
// refusing would make them unrunnable until the datacenter is
// configurable.
func (j *Job) Placement(node NodeAttrs) error {
	for _, u := range j.Unmet(node) {
		if u.Kind != PlaceDatacenters {
			return u
		}
	}
	return nil
}

// nodePool is the node's pool; berth's node is in "default" unless the
// attributes say otherwise.
func nodePool(node NodeAttrs) string {
	if p := node["node.pool"]; p != "" {
		return p
	}
	return "default"
}

// matchDatacenter: Nomad 1.6 datacenters are glob patterns ("dc*", "*").
func matchDatacenter(dcs []string, dc string) bool {
	return slices.ContainsFunc(dcs, func(pat string) bool {
		ok, err := path.Match(pat, dc)
		return pat == dc || (err == nil && ok)
	})
}

func quoteList(l []string) string {
	return "[" + strings.Join(quoteAll(l), ", ") + "]"
}

// Diagnostic is the refusal as a positioned diagnostic, for callers that
// report placement together with validation (an API's 400 answer).
func (e *PlacementError) Diagnostic() Diagnostic {
	return Diagnostic{File: e.Pos.File, Line: e.Pos.Line, Column: e.Pos.Column,
		Summary: fmt.Sprintf("%s in %s is not met by this node", e.What, e.Where), Detail: e.Node}
}
