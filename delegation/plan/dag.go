package plan

// The graph helpers take the subtasks and an index from ID to position;
// edges are the After lists (a subtask runs after each ID it names).

// findCycle returns one cycle of the dependency graph as IDs, the first
// repeated at the end (a → b → a), or nil when the graph is a DAG. The
// search starts from subtasks in plan order, so the cycle named is the
// same every time.
func findCycle(subs []Subtask, index map[string]int) []string {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(subs))
	var stack []int
	var cycle []string
	var visit func(i int) bool
	visit = func(i int) bool {
		color[i] = grey
		stack = append(stack, i)
		for _, a := range subs[i].After {
			j := index[a]
			switch color[j] {
			case grey:
				for k := len(stack) - 1; k >= 0; k-- {
					if stack[k] == j {
						for _, n := range stack[k:] {
							cycle = append(cycle, subs[n].ID)
						}
						cycle = append(cycle, subs[j].ID)
						break
					}
				}
				return true
			case white:
				if visit(j) {
					return true
				}
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
		return false
	}
	for i := range subs {
		if color[i] == white && visit(i) {
			// The walk follows edges from a subtask to what it waits for;
			// read in that order the cycle says "a waits for b".
			return cycle
		}
	}
	return nil
}

// ancestors returns, for each subtask, the set of IDs it depends on
// directly or through others. The graph must be a DAG.
func ancestors(subs []Subtask, index map[string]int) []map[string]bool {
	out := make([]map[string]bool, len(subs))
	var walk func(i int) map[string]bool
	walk = func(i int) map[string]bool {
		if out[i] != nil {
			return out[i]
		}
		m := map[string]bool{}
		out[i] = m
		for _, a := range subs[i].After {
			m[a] = true
			for k := range walk(index[a]) {
				m[k] = true
			}
		}
		return m
	}
	for i := range subs {
		walk(i)
	}
	return out
}

// order returns the subtask IDs in dependency order: every subtask after
// those it depends on, ties broken by plan order. It is the order the
// frontier is dispatched in and the assemble step receives fragments in.
func order(subs []Subtask) []string {
	index := make(map[string]int, len(subs))
	for i, s := range subs {
		index[s.ID] = i
	}
	indeg := make([]int, len(subs))
	next := make([][]int, len(subs))
	for i, s := range subs {
		for _, a := range s.After {
			j := index[a]
			next[j] = append(next[j], i)
			indeg[i]++
		}
	}
	done := make([]bool, len(subs))
	out := make([]string, 0, len(subs))
	for len(out) < len(subs) {
		progressed := false
		for i := range subs {
			if done[i] || indeg[i] > 0 {
				continue
			}
			done[i] = true
			out = append(out, subs[i].ID)
			for _, k := range next[i] {
				indeg[k]--
			}
			progressed = true
			break // restart from the top: the earliest ready subtask goes first
		}
		if !progressed {
			return out // a cycle; Validate refuses such plans before this runs
		}
	}
	return out
}
