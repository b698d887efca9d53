// Package errclass is LayerFS's one vocabulary of errors: a small set of
// classes (not found, exists, busy, head moved, invalid, unavailable, no
// space, corrupt, ...) that every layer's errors wrap, so that errors.Is
// answers the same question in the Store, the engine, the platforms, the
// API server and the SDK.
//
// Each class is mapped once, here, to its API wire code and HTTP status and
// to the CLI's exit code. A package's own sentinels say more and still
// belong to a class:
//
//	var ErrInvalidName = errclass.New(errclass.Invalid, "invalid name")
//
//	errors.Is(err, store.ErrInvalidName) // the specific error
//	errors.Is(err, errclass.Invalid)     // its class: 400 invalid_argument, exit 2
//
// The package imports only the standard library, so that the SDK (which
// may import only wire and the standard library) shares it: an API error
// the SDK decodes (*wire.Error) unwraps to the class of its code.
package errclass
