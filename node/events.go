package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/kithmesh/kith/node/api"
)

// handleAllEvents streams every delegation event committed on this node as
// server-sent events, from the moment of the request, until the client
// goes away. A client that reads too slowly misses events and is told with
// an "event: lagged" message (it can re-read a delegation's log).
func (n *Node) handleAllEvents(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		writeErr(w, http.StatusInternalServerError, errors.New("streaming unsupported"))
		return
	}
	ch, cancel := n.Store().Watch()
	defer cancel()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, ": kith delegation events\n\n")
	fl.Flush()
	tick := time.NewTicker(15 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case c := <-ch:
			b, _ := json.Marshal(api.DelegationEvent{
				ID: c.ID.String(), Role: c.Role, Seq: c.Event.Seq, At: c.Event.At,
				Type: c.Event.Type, State: c.Event.State, Terminal: c.Event.State.Terminal(),
			})
			fmt.Fprintf(w, "data: %s\n\n", b)
			if len(ch) == cap(ch) {
				fmt.Fprint(w, "event: lagged\ndata: {}\n\n")
			}
			fl.Flush()
		case <-tick.C:
			fmt.Fprint(w, ": keep-alive\n\n")
			fl.Flush()
		}
	}
}
