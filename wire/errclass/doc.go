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
// An error is classed and wrapped in one way, fmt.Errorf with the class (or
// a sentinel of it) as the first %w and the cause as a later %w:
//
//	fmt.Errorf("%w: mount path %q: %w", errclass.Invalid, p, err)
//
// Both stay reachable: errors.Is(err, errclass.Invalid) and
// errors.Is(err, fs.ErrNotExist) hold, and Of answers the class, which
// comes first, even when the cause is of another class. A cause formatted
// with %v is lost to errors.Is and errors.As; to flatten one on purpose,
// format err.Error().
//
// The package imports only the standard library, so that the SDK (which
// may import only wire and the standard library) shares it: an API error
// the SDK decodes (*wire.Error) unwraps to the class of its code.
package errclass
