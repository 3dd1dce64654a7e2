// Package plan owns WorkPlans: a goal split into bounded subtasks with
// dependency edges (a DAG), run across the mesh as child delegations of one
// parent, and the plan's decisions ledger (a blackboard its subtasks propose
// to and its owner curates).
//
// A Coordinator validates a plan file (Parse, Spec.Validate, Check: a DAG,
// known profiles, references only to outputs of dependencies, budgets
// within the plan's), records it, then dispatches the ready frontier in
// parallel through the delegation engine's exported API, in a fixed order
// (dependency order, ties in plan order), so the same plan advances the
// same way every time. A failed subtask is re-offered under the plan's
// retry policy to a provider that has not failed it; when every subtask is
// done, the assemble step receives every fragment in dependency order.
//
// Every step is written to the store before it happens: a subtask's
// attempt (with the marker its delegation will carry as context ID) before
// the delegation is made, its result and the proposals it carried in one
// write. A coordinator that restarts resumes each unfinished plan without
// running a finished subtask again: it finds the delegation of an attempt
// it had not recorded yet by its marker, and waits on those in flight,
// which the engine reattaches to.
//
// Ledger entries are only ever appended (ledger.go): proposals land
// pending; a merge appends a decision that names its proposal, a rejection
// a rejection with its reason; the same slug twice is two entries. Merged
// decisions reach every subtask dispatched after the merge, before its task
// text.
package plan
