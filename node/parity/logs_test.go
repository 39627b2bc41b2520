package parity_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/berth/berth/internal/logfile"
	"github.com/berth/berth/node/nomad/nomadtest"
)

// The logs case (testdata/logs.nomad.hcl) adds read.* facts: what each
// system's log reader returns for the task, beside what the task saw in
// $NOMAD_ALLOC_DIR/logs. berth's side reads through logfile.Start and
// Follow, as its API (alloc logs, -tail, -f) and status page do; Nomad's
// through `nomad alloc logs`.

// berthLogDir is where berth keeps an allocation's task logs.
func berthLogDir(dataDir, allocID string) string {
	return filepath.Join(dataDir, "alloc", allocID, "alloc", "logs")
}

// berthTasks names the tasks with a stdout log in the allocation.
func berthTasks(dataDir, allocID string) ([]string, error) {
	ents, err := os.ReadDir(berthLogDir(dataDir, allocID))
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []string
	for _, e := range ents {
		i := strings.LastIndex(e.Name(), ".stdout.")
		if i <= 0 || seen[e.Name()[:i]] {
			continue
		}
		seen[e.Name()[:i]] = true
		out = append(out, e.Name()[:i])
	}
	return out, nil
}

// berthRead returns what berth's log reader serves: the task's whole
// stream, or its last lines.
func berthRead(dataDir, allocID, task, stream string, lines int) ([]byte, error) {
	dir, name := berthLogDir(dataDir, allocID), task+"."+stream
	pos, err := logfile.Start(dir, name, 0, lines)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	err = logfile.Follow(context.Background(), dir, name, pos, &b, logfile.FollowOptions{})
	return b.Bytes(), err
}

// berthRetained is the total size of the task's retained stdout files.
func berthRetained(dataDir, allocID, task string) (int64, error) {
	dir := berthLogDir(dataDir, allocID)
	idx, err := logfile.Indexes(dir, task+".stdout")
	if err != nil {
		return 0, err
	}
	var total int64
	for _, i := range idx {
		fi, err := os.Stat(filepath.Join(dir, task+".stdout."+strconv.Itoa(i)))
		if err != nil {
			return 0, err
		}
		total += fi.Size()
	}
	return total, nil
}

func berthLogFacts(f facts, dataDir, allocID, task string, stdout []byte) error {
	stderr, err := berthRead(dataDir, allocID, task, "stderr", 0)
	if err != nil {
		return err
	}
	tail, err := berthRead(dataDir, allocID, task, "stdout", 3)
	if err != nil {
		return err
	}
	retained, err := berthRetained(dataDir, allocID, task)
	if err != nil {
		return err
	}
	logFacts(f, stdout, stderr, tail, retained)
	return nil
}

func nomadLogFacts(f facts, a *nomadtest.Agent, allocID, task string, stdout []byte) error {
	stderr, err := a.Nomad("alloc", "logs", "-stderr", allocID, task)
	if err != nil {
		return err
	}
	tail, err := a.Nomad("alloc", "logs", "-tail", "-n", "3", allocID, task)
	if err != nil {
		return err
	}
	var ls []struct {
		Name string
		Size int64
	}
	if err := a.Get("/v1/client/fs/ls/"+allocID+"?path=/alloc/logs", &ls); err != nil {
		return err
	}
	var retained int64
	for _, e := range ls {
		if strings.HasPrefix(e.Name, task+".stdout.") {
			retained += e.Size
		}
	}
	logFacts(f, stdout, []byte(stderr), []byte(tail), retained)
	return nil
}

// logFacts describes what a reader returned in facts that do not depend
// on where the writer cut the files (Nomad's logmon cuts at its reads'
// boundaries): the stream is every retained file, it starts on a whole
// line and its counter lines follow each other to the last one.
func logFacts(f facts, stdout, stderr, tail []byte, retained int64) {
	f["read.stderr"] = strconv.Quote(string(stderr))
	f["read.tail3"] = strconv.Quote(string(tail))
	f["read.is_all_retained"] = strconv.FormatBool(int64(len(stdout)) == retained)
	var nums []int
	for _, l := range strings.Split(string(stdout), "\n") {
		if n, err := strconv.Atoi(l); err == nil && len(l) == 6 {
			nums = append(nums, n)
		}
	}
	f["read.first_line_whole"] = strconv.FormatBool(len(stdout) > 6 && stdout[6] == '\n')
	consecutive := len(nums) > 0
	for i := 1; i < len(nums); i++ {
		consecutive = consecutive && nums[i] == nums[i-1]+1
	}
	f["read.counter_consecutive"] = strconv.FormatBool(consecutive)
	if len(nums) > 0 {
		f["read.counter_last"] = fmt.Sprint(nums[len(nums)-1])
		// More than a file's worth was written: the oldest file
		// was dropped, as max_files = 2 says.
		f["read.counter_first_dropped"] = strconv.FormatBool(nums[0] > 1)
	}
}
