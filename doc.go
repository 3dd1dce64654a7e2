// Package kith is the root of the kith module: an encrypted peer-to-peer
// overlay node that joins home-lab machines into one private mesh and lets
// them delegate agent tasks to each other.
//
// This package holds no code of its own; its tests enforce the rules that
// hold across the module: the import direction between packages (see
// DESIGN.md, "Module and packages") and a doc comment on every package.
package kith
