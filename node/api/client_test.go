package api

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kithmesh/kith/protocol"
)

// Events reads a status as large as a task carries, escaped: a command
// that streamed 10 MiB of output in one status failed `kith delegate`
// with "bufio.Scanner: token too long" under a cap of 8 MiB.
func TestEventsReadsLargeStatus(t *testing.T) {
	partial := strings.Repeat("\"quoted\" ", 2<<20) // 18 MiB, 22 MiB as JSON
	sock := filepath.Join(t.TempDir(), "api.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		for _, ev := range []Event{{Seq: 1, Type: "status", State: protocol.StateRunning, Partial: partial}, {Seq: 2, Type: "result", State: StateCompleted, Terminal: true}} {
			b, _ := json.Marshal(ev)
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })

	c := NewClient(sock)
	defer c.Close()
	var got []Event
	if err := c.Events(context.Background(), "x", func(ev Event) { got = append(got, ev) }); err != nil {
		t.Fatalf("Events: %v", err)
	}
	if len(got) != 2 || got[0].Partial != partial || !got[1].Terminal {
		t.Fatalf("got %d events, the first with %d bytes of output; want 2, the first with %d", len(got), len(got[0].Partial), len(partial))
	}
}
