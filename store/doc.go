// Package store defines the Store protocol: what holds the scopes' state
// when several throttle.ThrottlingManagers share one set of limits,
// typically one manager per worker process of a crawler fleet. A manager
// uses a Store when throttle.Config.Store is set:
//
//	cfg := throttle.DefaultConfig()
//	cfg.Store = store.NewMemory(nil) // or a redisstore.Store
//	m, err := throttle.New(cfg)
//
// Like database/sql/driver, the package is mostly what an implementation
// provides and what the manager asks of it; crawlers pick an
// implementation and set it in the Config:
//
//   - the redisstore module (github.com/crawlerkit/throttle/redisstore)
//     shares state across processes and machines through Redis, with Lua
//     scripts that apply the admission rules atomically;
//   - Memory shares state among the managers of one process (a simulated
//     fleet, tests), with the very code that admits requests in a manager
//     without a Store;
//   - a custom Store implements the Store interface on another database.
//
// The manager sends, for each request, one Request covering all of its
// scopes and, at the release, one Release carrying what the scopes'
// policies learned; it runs the policies itself, so a Store only counts,
// compares times and keeps versions. Package storetest
// (github.com/crawlerkit/throttle/storetest) is the conformance suite an
// implementation runs: two managers share the store under test and a fake
// clock, and every admission rule and every kind of learned state must
// hold across them. Memory and redisstore both pass it.
//
// A Store serves the waiters of a scope first come, first served across
// the managers (see TurnGrace), and applies the state it finds within the
// bounds each request carries (Scope.MaxWait, Scope.MaxConcurrency), so no
// neighbour, older worker or clock that ran ahead can hold a scope longer.
//
// An Error, wrapping the store's error and matching ErrUnavailable, is
// what throttle's Acquire returns when the Store fails and
// throttle.Config.StoreFallbackLocal is false (the
// default: fail closed).
package store
