// Package mdfence reads the fenced code blocks of a Markdown document, so
// that tests can run or check what the docs tell people to type: the
// tutorial's shell blocks, a README walkthrough, a worked example's output.
package mdfence

import (
	"regexp"
	"strings"
)

// Block is one fenced code block.
type Block struct {
	// Lang is the first word of the fence's info string ("sh", "yaml",
	// "text"), "" when there is none.
	Lang string
	// Line is the 1-based line number of the opening fence.
	Line int
	// Heading is the text of the nearest ATX heading above the block, ""
	// when there is none.
	Heading string
	// Note is the text of an HTML comment standing alone on the last
	// non-blank line before the fence (`<!-- test: skip -->` gives
	// "test: skip"), "" when there is none. Readers of the rendered
	// document never see it, so it carries instructions for tests.
	Note string
	// Text is the block's content, every line ending in "\n", without the
	// fences.
	Text string
}

var (
	// opening is a fence that opens a block: up to three spaces, three or
	// more backticks or tildes, then the info string.
	opening = regexp.MustCompile("^ {0,3}(`{3,}|~{3,})\\s*([^`\\s]*)")
	// heading is an ATX heading.
	heading = regexp.MustCompile(`^ {0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	// note is an HTML comment alone on its line.
	note = regexp.MustCompile(`^\s*<!--\s*(.*?)\s*-->\s*$`)
)

// Parse returns the fenced code blocks of a Markdown document in document
// order. A block left open runs to the end of the document, as CommonMark
// reads it.
func Parse(doc string) []Block {
	var (
		blocks   []Block
		cur      *Block
		closer   string // the fence that closes cur
		text     strings.Builder
		head     string
		lastLine string // the last non-blank line outside a block
	)
	lines := strings.SplitAfter(doc, "\n")
	for i, raw := range lines {
		if raw == "" {
			continue
		}
		line := strings.TrimSuffix(strings.TrimSuffix(raw, "\n"), "\r")
		if cur != nil {
			t := strings.TrimSpace(line)
			if strings.HasPrefix(t, closer) && strings.Trim(t, closer[:1]) == "" && len(line)-len(strings.TrimLeft(line, " ")) <= 3 {
				cur.Text = text.String()
				blocks = append(blocks, *cur)
				cur, lastLine = nil, line
				continue
			}
			text.WriteString(line + "\n")
			continue
		}
		if m := opening.FindStringSubmatch(line); m != nil {
			b := Block{Lang: m[2], Line: i + 1, Heading: head}
			if n := note.FindStringSubmatch(lastLine); n != nil {
				b.Note = n[1]
			}
			cur, closer = &b, m[1]
			text.Reset()
			continue
		}
		if m := heading.FindStringSubmatch(line); m != nil {
			head = m[1]
		}
		if strings.TrimSpace(line) != "" {
			lastLine = line
		}
	}
	if cur != nil {
		cur.Text = text.String()
		blocks = append(blocks, *cur)
	}
	return blocks
}

// After returns the first block of the language lang that follows the
// first line of doc equal to heading (e.g. "## Under gyre worker"), and
// false when there is no such heading or block.
func After(doc, heading, lang string) (Block, bool) {
	at := 0
	for i, l := range strings.Split(doc, "\n") {
		if strings.TrimRight(l, " \r") == heading {
			at = i + 1
			break
		}
	}
	if at == 0 {
		return Block{}, false
	}
	for _, b := range Parse(doc) {
		if b.Line > at && b.Lang == lang {
			return b, true
		}
	}
	return Block{}, false
}
