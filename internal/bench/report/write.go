package report

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
)

// Files WriteAll writes in an output directory (beside the JSON-lines
// sample log the runner appends to as samples complete).
const (
	SamplesFile         = "samples.jsonl"
	SummaryFile         = "summary.json"
	TableMarkdownFile   = "cells.md"
	TableTextFile       = "cells.txt"
	ChartFile           = "ratios.png"
	SessionFile         = "session.json"
	SessionMarkdownFile = "session.md"
	SessionTextFile     = "session.txt"
)

// WriteAll renders r into dir: summary.json, the cells table as Markdown and
// text, the ratio chart (ChartWidth x ChartHeight) and, when r has session
// figures, their JSON and tables. Each file is written to a temporary name
// and renamed, so a reader never sees half a file.
func (r Results) WriteAll(dir string) error {
	type out struct {
		name  string
		write func(*bytes.Buffer) error
	}
	outs := []out{
		{SummaryFile, func(b *bytes.Buffer) error { return WriteSummaryJSON(b, r.Summarize()) }},
		{TableMarkdownFile, func(b *bytes.Buffer) error { return r.WriteMarkdown(b) }},
		{TableTextFile, func(b *bytes.Buffer) error { return r.WriteText(b) }},
		{ChartFile, func(b *bytes.Buffer) error { return r.WriteChart(b, ChartWidth, ChartHeight) }},
	}
	if len(r.Session) > 0 {
		outs = append(outs,
			out{SessionFile, func(b *bytes.Buffer) error { return WriteSessionJSON(b, r.Session) }},
			out{SessionMarkdownFile, func(b *bytes.Buffer) error { return r.WriteSessionMarkdown(b) }},
			out{SessionTextFile, func(b *bytes.Buffer) error { return r.WriteSessionText(b) }},
		)
	}
	for _, o := range outs {
		var b bytes.Buffer
		if err := o.write(&b); err != nil {
			return fmt.Errorf("render %s: %w", o.name, err)
		}
		if err := writeFile(filepath.Join(dir, o.name), b.Bytes()); err != nil {
			return err
		}
	}
	return nil
}

func writeFile(path string, data []byte) (err error) {
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close() // the write error is the one to report
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
