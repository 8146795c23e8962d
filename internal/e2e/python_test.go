package e2e

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	coordhostv1 "github.com/coordhost/coordhost/gen/coordhost/v1"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// pyScript is the Python client; see its docstring.
const pyScript = "testdata/coordhost_client.py"

// pyStep is one line of the Python client's output: a step's response or
// error, or a failed expectation (Fail).
type pyStep struct {
	Step      string            `json:"step"`
	Response  json.RawMessage   `json:"response"`
	Responses []json.RawMessage `json:"responses"`
	Error     *struct {
		Code    string            `json:"code"`
		Message string            `json:"message"`
		Details []json.RawMessage `json:"details"`
	} `json:"error"`
	Fail string `json:"fail"`
}

// python runs scenario_<scenario> of testdata/coordhost_client.py with
// Debian's python3 and grpcio against d, and returns its steps by name. It
// fails the test when the script fails (its own expectations included).
func (d *daemon) python(t *testing.T, scenario string) map[string]pyStep {
	t.Helper()
	bin := need(t, pythonClient)
	desc := descriptorSetFile(t)
	r := runClient(t, "", bin, "-I", pyScript, "--target", d.Addr, "--descriptors", desc, scenario)
	steps := map[string]pyStep{}
	sc := bufio.NewScanner(strings.NewReader(r.Stdout))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var s pyStep
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			t.Fatalf("python %s: line %q: %v\n%s", scenario, sc.Text(), err, r)
		}
		if s.Fail != "" {
			t.Fatalf("python %s: %s\n%s", scenario, s.Fail, r)
		}
		steps[s.Step] = s
	}
	if r.Code != 0 {
		t.Fatalf("python %s: %s", scenario, r)
	}
	return steps
}

var (
	descOnce sync.Once
	descPath string
	descErr  error
)

// descriptorSetFile writes, once per test run, a FileDescriptorSet of the
// coordhost.v1 files, everything they import and google/rpc/status.proto
// (the Python client reads error details with it), each file after its
// imports, from the Go registry of the generated packages: the schema the
// daemon was built with, with no protoc step.
func descriptorSetFile(t *testing.T) string {
	t.Helper()
	descOnce.Do(func() {
		var set descriptorpb.FileDescriptorSet
		seen := map[string]bool{}
		var add func(fd protoreflect.FileDescriptor)
		add = func(fd protoreflect.FileDescriptor) {
			if seen[fd.Path()] {
				return
			}
			seen[fd.Path()] = true
			imps := fd.Imports()
			for i := range imps.Len() {
				add(imps.Get(i).FileDescriptor)
			}
			set.File = append(set.File, protodesc.ToFileDescriptorProto(fd))
		}
		var roots []protoreflect.FileDescriptor
		protoregistry.GlobalFiles.RangeFilesByPackage(coordhostv1.File_coordhost_v1_session_proto.Package(), func(fd protoreflect.FileDescriptor) bool {
			roots = append(roots, fd)
			return true
		})
		slices.SortFunc(roots, func(a, b protoreflect.FileDescriptor) int { return strings.Compare(a.Path(), b.Path()) })
		for _, fd := range append(roots, statuspb.File_google_rpc_status_proto) {
			add(fd)
		}
		b, err := proto.Marshal(&set)
		if err != nil {
			descErr = err
			return
		}
		descPath = filepath.Join(tmpDir, "coordhost-v1.binpb")
		descErr = os.WriteFile(descPath, b, 0o644)
	})
	if descErr != nil {
		t.Fatal(descErr)
	}
	return descPath
}

// Python's grpcio (Debian's python3-grpcio), with message classes built
// from the descriptors alone, runs a session's life: create, renew, get,
// KeepAlive, close, and reads the NotFound's ErrorDetail after it.
func TestPythonGrpcioSession(t *testing.T) {
	t.Parallel()
	need(t, pythonClient)
	d := startDaemon(t, "")
	steps := d.python(t, "session")
	for _, name := range []string{"create", "renew", "get", "keepalive", "close", "get_closed", "renew_bad_id"} {
		if _, ok := steps[name]; !ok {
			t.Errorf("no step %q in the Python client's output", name)
		}
	}
	var created coordhostv1.CreateSessionResponse
	decodeJSON(t, steps["create"].Response, &created)
	if e := steps["get_closed"].Error; e == nil || e.Code != "NOT_FOUND" || len(e.Details) != 1 {
		t.Errorf("get_closed: %+v, want NOT_FOUND with one detail", e)
	} else {
		var detail struct {
			Type   string `json:"@type"`
			Reason string `json:"reason"`
			Field  string `json:"field"`
		}
		decodeJSON(t, e.Details[0], &detail)
		if detail.Type != "coordhost.v1.ErrorDetail" || detail.Reason != "REASON_SESSION_NOT_FOUND" || detail.Field != "session_id" {
			t.Errorf("get_closed detail: %+v", detail)
		}
	}
	// Closed in Redis too: the daemon kept nothing.
	if n := d.dbsize(t); n != "0" {
		t.Errorf("DBSIZE %s after session %s closed, want 0", n, created.Session.GetSessionId())
	}
}
