// Package s3bucket is LayerFS's client of an S3-compatible bucket: put an
// immutable object (multipart above a part size), read a byte range of one,
// check and delete objects, each retried with exponential backoff and jitter
// when the error can pass (connection refused or reset, timeouts, 5xx,
// throttling) and failing at once when it cannot (no such key, access
// denied). It knows nothing of what the objects hold; the store names them
// by content and verifies what it reads.
package s3bucket
