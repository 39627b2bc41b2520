package cli

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/berth/berth/api"
	"github.com/berth/berth/job/jobspec"
)

// submitRequest is a job file and its variables as the agent takes them:
// the job variables of vf and the NOMAD_VAR_ entries of this process's
// environment go along, the var files read here (the agent never reads
// a client's files).
func (vf *VarFlags) submitRequest(path string) (api.JobSubmitRequest, error) {
	src, err := readJobFile(path)
	if err != nil {
		return api.JobSubmitRequest{}, err
	}
	// What JSON cannot carry (invalid UTF-8 becomes U+FFFD) or is not
	// worth sending is refused here, positioned in the file.
	if err := jobspec.CheckSource(src, path); err != nil {
		return api.JobSubmitRequest{}, err
	}
	req := api.JobSubmitRequest{JobHCL: string(src), Filename: filepath.Base(path), Vars: vf.Vars}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, jobspec.VarEnvPrefix) {
			req.EnvVars = append(req.EnvVars, kv)
		}
	}
	for _, f := range vf.VarFiles {
		b, err := os.ReadFile(f)
		if err != nil {
			return api.JobSubmitRequest{}, fmt.Errorf("read -var-file %s: %w", f, err)
		}
		req.VarFiles = append(req.VarFiles, api.VarFile{Name: filepath.Base(f), Content: string(b)})
	}
	return req, nil
}

// DispatchFlags are a dispatch's -meta KEY=VALUE (repeatable) and payload
// (a file, or - for standard input).
type DispatchFlags struct {
	Meta []string
}

func (df *DispatchFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&df.Meta, "meta", nil, "a dispatch meta value: -meta KEY=VALUE (repeatable; the job's meta_required and meta_optional say which)")
}

// meta returns the -meta values as a map; a later key wins.
func (df *DispatchFlags) meta() (map[string]string, error) {
	if len(df.Meta) == 0 {
		return nil, nil
	}
	m := map[string]string{}
	for _, kv := range df.Meta {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("-meta %q is not KEY=VALUE", kv)
		}
		m[k] = v
	}
	return m, nil
}

// readPayload reads a payload file, or standard input for "-", at most
// one byte more than jobspec.MaxPayloadSize (so that Dispatch can say it
// is too large); "" is no payload.
func readPayload(path string, stdin io.Reader) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	r := stdin
	if path != "-" {
		f, err := os.Open(path)
		if err != nil {
			return nil, fmt.Errorf("read payload: %w", err)
		}
		defer f.Close()
		r = f
	}
	b, err := io.ReadAll(io.LimitReader(r, jobspec.MaxPayloadSize+1))
	if err != nil {
		return nil, fmt.Errorf("read payload %s: %w", path, err)
	}
	return b, nil
}

func newJobDispatchCmd(g *Globals, cf *ClientFlags) *cobra.Command {
	df := &DispatchFlags{}
	var detach bool
	cmd := &cobra.Command{
		Use:   "dispatch [-meta KEY=VALUE]... JOB [PAYLOAD-FILE|-]",
		Short: "Dispatch a parameterized job: the agent runs a child job with this meta and payload",
		Long: `Dispatch a parameterized job registered with the agent, as "nomad job dispatch": the meta
values are checked against its meta_required and meta_optional, the payload (a file, or - for
standard input; at most 16 KiB) against its payload setting. The agent runs a child job of its own
ID, <job>/dispatch-<unix seconds>-<8 hex digits>, whose tasks see NOMAD_META_<key> and find the
payload in local/<file> of their dispatch_payload block.`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			meta, err := df.meta()
			if err != nil {
				return err
			}
			var payload []byte
			if len(args) == 2 {
				if payload, err = readPayload(args[1], cmd.InOrStdin()); err != nil {
					return err
				}
			}
			resp, err := agentCall(cf, func(c *api.Client) (*api.JobDispatchResponse, error) {
				return c.DispatchJob(cmd.Context(), args[0], api.JobDispatchRequest{Meta: meta, Payload: payload})
			})
			if err != nil {
				return err
			}
			if g.JSON {
				return g.PrintJSON(resp)
			}
			fmt.Fprintf(g.stdout, "dispatched job %q from %q\n", resp.DispatchedJobID, resp.ParentJobID)
			if !detach {
				fmt.Fprintf(g.stdout, "follow it with: berth job status %s\n", resp.DispatchedJobID)
			}
			return nil
		},
	}
	df.register(cmd)
	// Nomad's dispatch waits for the evaluation unless -detach; berth's
	// returns once the child is started, so both are the same here.
	cmd.Flags().BoolVar(&detach, "detach", false, "return at once (berth's dispatch always does; accepted for Nomad's command lines)")
	return cmd
}

// dispatchForeground makes the child job `berth run` runs for a
// parameterized job, from --meta and --payload.
func dispatchForeground(job *jobspec.Job, df *DispatchFlags, payloadPath string, stdin io.Reader) (*jobspec.Job, error) {
	meta, err := df.meta()
	if err != nil {
		return nil, err
	}
	if !job.IsParameterized() {
		if len(meta) > 0 || payloadPath != "" {
			return nil, fmt.Errorf("job %q is not parameterized: --meta and --payload apply to a job with a parameterized block", job.ID)
		}
		return job, nil
	}
	payload, err := readPayload(payloadPath, stdin)
	if err != nil {
		return nil, err
	}
	return job.Dispatch(meta, payload, time.Now(), nil)
}
