package node

import "net/http"

func (n *Node) handleStatus(w http.ResponseWriter, r *http.Request) {
	http.Error(w, "not yet", http.StatusNotImplemented)
}
