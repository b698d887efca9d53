// Package sqltx is the Store's transaction as its statements see it: a
// database/sql transaction whose statements and rows are counted in a
// tally, and whose statements, written once in SQLite's spelling, run in
// the engine's dialect (package schema). Package store begins, ends and
// accounts every transaction (DB.withTx); the packages of the Store that
// run SQL inside one (store, maintenance) do it through a Tx.
//
// A Tx is used by one goroutine at a time, so its tally needs no atomics.
package sqltx
