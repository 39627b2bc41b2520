package drivercfg

import (
	"reflect"
	"strings"
	"testing"
)

// recorder is a driver's decoder reduced to what it saw.
type recorder struct {
	cfg    map[string]any
	events []string
}

func (r *recorder) Warn(key, why string)   { r.events = append(r.events, "warn "+key+": "+why) }
func (r *recorder) Refuse(key, why string) { r.events = append(r.events, "refuse "+key+": "+why) }

func set(d *recorder, key string) {
	_, present := d.cfg[key]
	d.events = append(d.events, "set "+key+" "+map[bool]string{true: "present", false: "absent"}[present])
}

func TestWalk(t *testing.T) {
	table := Table[*recorder]{
		Run("b", set),
		Accept("a", "not yet", set),
		Deprecate("old", "rename it", set),
		Refuse[*recorder]("bad", "never"),
	}
	tests := []struct {
		name        string
		cfg         map[string]any
		wantEvents  []string
		wantUnknown []string
	}{
		{"empty: every row runs, in order", map[string]any{},
			[]string{"set b absent", "set a absent", "set old absent"}, nil},
		{"deprecated warns then sets", map[string]any{"old": 1},
			[]string{"set b absent", "set a absent", "warn old: rename it", "set old present"}, nil},
		{"refused reports, never sets", map[string]any{"bad": 1, "b": 2},
			[]string{"set b present", "set a absent", "set old absent", "refuse bad: never"}, nil},
		{"unknown sorted", map[string]any{"z": 1, "c": 2, "a": 3},
			[]string{"set b absent", "set a present", "set old absent"}, []string{"c", "z"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{cfg: tt.cfg}
			unknown := table.Walk(r, tt.cfg)
			if !reflect.DeepEqual(r.events, tt.wantEvents) {
				t.Errorf("events = %q, want %q", r.events, tt.wantEvents)
			}
			if !reflect.DeepEqual(unknown, tt.wantUnknown) {
				t.Errorf("unknown = %q, want %q", unknown, tt.wantUnknown)
			}
		})
	}
	if got, want := table.Names(), []string{"a", "b", "bad", "old"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names = %q, want %q", got, want)
	}
	if got, want := table.Order(), []string{"b", "a", "old", "bad"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Order = %q, want %q", got, want)
	}
	md := Markdown(table.Rows())
	for _, want := range []string{"| `a` | accepted, not acted on | not yet |", "| `bad` | refused | never |", "| `old` | works, with a warning | rename it |"} {
		if !strings.Contains(md, want) {
			t.Errorf("Markdown lacks %q:\n%s", want, md)
		}
	}
}
