package mdfence

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse_BlocksInDocumentOrderWithLangHeadingAndNote(t *testing.T) {
	t.Parallel()
	doc := "# Title\n\nprose\n\n## Start\n\n<!-- test: skip -->\n\n```sh\necho one\n\n# not a heading\n```\n" +
		"text\n~~~yaml title=x\na: ```\n~~~\n<!-- a note for nothing -->\nprose\n````text\n```\nstill in\n````\n" +
		"### Last\n```\nopen to the end\n"
	want := []Block{
		{Lang: "sh", Line: 9, Heading: "Start", Note: "test: skip", Text: "echo one\n\n# not a heading\n"},
		{Lang: "yaml", Line: 15, Heading: "Start", Text: "a: ```\n"},
		{Lang: "text", Line: 20, Heading: "Start", Text: "```\nstill in\n"},
		{Lang: "", Line: 25, Heading: "Last", Text: "open to the end\n"},
	}
	if diff := cmp.Diff(want, Parse(doc)); diff != "" {
		t.Errorf("Parse (-want +got):\n%s", diff)
	}
}

func TestParse_ClosingFenceNeedsTheSameCharacterAndLength(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"tilde does not close backticks", "```\n~~~\nx\n```\n", "~~~\nx\n"},
		{"shorter fence does not close", "````\n```\nx\n````\n", "```\nx\n"},
		{"longer fence closes", "```\nx\n`````\n", "x\n"},
		{"fence with text after does not close", "```\n```sh\nx\n```\n", "```sh\nx\n"},
		{"CRLF lines", "```sh\r\nx\r\n```\r\n", "x\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := Parse(tc.doc)
			if len(got) != 1 || got[0].Text != tc.want {
				t.Errorf("Parse(%q) = %+v, want one block holding %q", tc.doc, got, tc.want)
			}
		})
	}
}

func TestAfter_FirstBlockOfTheLanguageBelowTheHeading(t *testing.T) {
	t.Parallel()
	doc := "## A\n```sh\na\n```\n## B\n```yaml\nb: 1\n```\n```sh\nb\n```\n```sh\nc\n```\n"
	for _, tc := range []struct {
		heading, lang, want string
		ok                  bool
	}{
		{"## A", "sh", "a\n", true},
		{"## B", "sh", "b\n", true},
		{"## B", "yaml", "b: 1\n", true},
		{"## A", "text", "", false},
		{"## C", "sh", "", false},
		{"## ", "sh", "", false},
	} {
		b, ok := After(doc, tc.heading, tc.lang)
		if ok != tc.ok || b.Text != tc.want {
			t.Errorf("After(%q, %q) = %q, %v; want %q, %v", tc.heading, tc.lang, b.Text, ok, tc.want, tc.ok)
		}
	}
}
