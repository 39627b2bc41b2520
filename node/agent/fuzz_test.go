package agent

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
	"github.com/berth/berth/job/jobspec/jobspectest"
)

// FuzzSubmitBody feeds the API's JSON decoding and the job parser behind
// it (what POST /v1/jobs and /v1/jobs/plan do with a body) arbitrary bytes,
// seeded with deep nesting and (testdata/fuzz/FuzzSubmitBody) the
// evaluation bombs of issue 18: nothing may panic, overflow the stack or
// exhaust memory, and every refusal is a 4xx. The short deadline keeps
// CI's fixed count of inputs fast.
func FuzzSubmitBody(f *testing.F) {
	for _, seed := range []string{
		`{"job_hcl":"job \"x\" {\n  group \"g\" { task \"t\" { driver = \"raw_exec\" } }\n}\n","filename":"x.hcl"}`,
		`{"job_hcl":"x = ` + strings.Repeat("[", 5000) + `"}`,
		strings.Repeat(`{"job_hcl":`, 3000),
		strings.Repeat("[", 20000),
		`{"job_hcl":"job \"x\" { meta { a = \"${` + strings.Repeat(`\"${`, 2000) + `\" } }"}`,
	} {
		f.Add([]byte(seed))
	}
	// The evaluation bombs of issue 18, as the budget tests send them
	// (also checked in: TestFuzzCorpusSubmitBody).
	for _, b := range jobspectest.EvalBombs {
		f.Add(submitSeed(b))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodPost, "/v1/jobs/plan", strings.NewReader(string(body)))
		var in api.JobSubmitRequest
		if !decodeBody(rec, req, &in) {
			if rec.Code < 400 || rec.Code >= 500 {
				t.Fatalf("refused body got status %d", rec.Code)
			}
			return
		}
		_, _ = jobspec.Parse([]byte(in.JobHCL), in.Filename, jobspec.ParseOptions{Node: jobspec.LocalNode(), EvalTimeout: 100 * time.Millisecond})
	})
}

// submitSeed is bomb b as FuzzSubmitBody's input: the body
// TestEvalBudgetAgent posts.
func submitSeed(b jobspectest.Bomb) []byte {
	body, err := json.Marshal(api.JobSubmitRequest{JobHCL: jobspectest.WithGroup(b.Src), Filename: "bomb.hcl"})
	if err != nil {
		panic(err)
	}
	return body
}

// FuzzSubmitBody's checked-in corpus holds every evaluation bomb.
func TestFuzzCorpusSubmitBody(t *testing.T) {
	jobspectest.CheckCorpus(t, filepath.Join("testdata", "fuzz", "FuzzSubmitBody"), submitSeed)
}
