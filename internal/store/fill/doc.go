// Package fill is the policy of a Store's cache of contents (package
// cache holds the files): what goes in, when, and what is trusted.
//
//   - Behind a capture (Capture, fill.go): the contents a capture
//     stores are placed from the bytes it read, by a bounded queue of
//     low-priority workers, so that a workspace opened on the commit
//     finds them; what the queue has no room for is dropped, and fetched
//     from the packs behind the capture (Behind), one capture at a time.
//   - Ahead of a workspace's reads (Prefetch, prefetch.go): the contents
//     a commit needs that the cache lacks are read from the packs in
//     spans of many chunks, in pack order, checked, and placed, while
//     the workspace's own reads go first (Foreground) and may take what
//     a prefetch or the queue holds (Serve).
//   - Trust (trust.go): a cache file is handed to the kernel only once
//     this process has checked it against its content's ID (Ready,
//     Trust, TrustFile); a damaged one is evicted and made again.
//
// Package store makes one Cache per DB and reads the packs and the index
// for it (Source); its DB methods (NewCacheFill, Prefetch, Ready, ...)
// are the entry points, and re-export the types (store.CacheFill is a
// Capture, store.Content a Content, ...). Filling is best effort: nothing it does fails a
// capture, and a content it does not place is made on first read
// (store's Materialize).
package fill
