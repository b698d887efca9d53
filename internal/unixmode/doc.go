// Package unixmode maps the file type bits of a stat's st_mode to
// fs.FileMode, for the code that stats through raw descriptors (the
// engine's listings, fswatch's events).
package unixmode
