// Package account counts what one request cost: the Store work (SQL
// transactions, statements and rows, pack bytes written and read, chunks,
// tree cache look-ups, bytes placed in the cache of contents) and the FUSE
// requests done on its behalf. A receipt is an account's figures.
//
// A request carries its Account in its context (With, Open); whoever does
// work for it adds to the account found there (From), on whatever
// goroutine the work runs, as long as the context travels with it or the
// account was taken from it when the work was handed over (a Store batch
// takes its creator's). Work with no account in its context (prefetches,
// metadata images built ahead, GC, lease renewals) belongs to no request,
// and so does work done behind a request that may outlast its answer (the
// cache fill behind a capture): a receipt, cut when its request answers,
// does not depend on how far such work got.
//
// The daemon's totals are counted apart, at the same places, in an Account
// of the Store's own, so that every unit of work is counted once in the
// totals and at most once in one request's account: a total is the sum of
// the requests' accounts plus the work of no request, whatever their
// timing, and no figure is ever read as a difference of counters that
// other requests move too. An account opened inside another (Open, a
// fork's commit) adds to its parent as well, so an operation's receipt
// includes the operations it made.
//
// An Account is safe for concurrent use; a nil *Account counts nothing, so
// callers need not test for one.
package account
