package dataset_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/internal/dataset"
)

// unicodeText holds characters that break careless writers: NUL and other
// C0 controls, the line and paragraph separators, a BOM, an emoji with a
// skin tone and a ZWJ sequence, a combining accent left unnormalised, a
// right-to-left mark, astral CJK, HTML and JSON syntax, a lone "\".
const unicodeText = "nul:\x00 bel:\a sep:\u2028 para:\u2029 bom:\ufeff 👍🏽 👩‍👩‍👧 e\u0301 \u200fعربي 𠀋 <b>&amp;</b> {\"k\":[1]} \\ end"

// TestSameInputSameBytes: every format writes byte-identical files from
// the same input, whatever order the source's rollouts were held in.
func TestSameInputSameBytes(t *testing.T) {
	t.Parallel()
	src := sliceSource{
		weatherRollout("r-3", "g1", 0, "c3", unicodeText),
		weatherRollout("r-1", "g1", 1, "c1", "18°C."),
		weatherRollout("r-2", "g2", 1, "c2", "Sunny."),
	}
	reversed := sliceSource{src[2], src[1], src[0]}
	for _, f := range dataset.Formats {
		a, ma := write(t, sel(f), src)
		b, mb := write(t, sel(f), reversed)
		if !bytes.Equal(a, b) || ma.FileSHA256 != mb.FileSHA256 {
			t.Errorf("%s: two builds differ", f)
		}
		if len(a) == 0 {
			t.Errorf("%s: empty file", f)
		}
	}
}

// TestUnicodeMessagesRoundTripExactly: any Unicode in a message reaches
// every format with the same string value, on one \n-terminated line
// without a raw U+2028 or U+2029.
func TestUnicodeMessagesRoundTripExactly(t *testing.T) {
	t.Parallel()
	s := sys(unicodeText)
	u := user("Say it back: " + unicodeText)
	r := convRollout("r-1", "g", 1, s, u, asst(unicodeText))
	loser := convRollout("r-2", "g", 0, s, u, asst("no"))
	for _, f := range dataset.Formats {
		t.Run(string(f), func(t *testing.T) {
			t.Parallel()
			file, m := write(t, sel(f), sliceSource{r, loser})
			if f == dataset.FormatSFT {
				golden(t, "unicode.jsonl", file)
			}
			if m.Rows == 0 {
				t.Fatal("no rows")
			}
			for i, row := range lines(t, file) {
				if bytes.Contains(row, []byte("\u2028")) || bytes.Contains(row, []byte("\u2029")) {
					t.Errorf("row %d holds a raw line or paragraph separator", i)
				}
				var v any
				if err := json.Unmarshal(row, &v); err != nil {
					t.Fatalf("row %d: %v", i, err)
				}
				n := countString(v, unicodeText)
				if n < 2 {
					t.Errorf("row %d holds the text exactly %d times, want at least 2 (system and reply)", i, n)
				}
			}
		})
	}
}

// countString counts the strings in v that equal s or end with it.
func countString(v any, s string) int {
	switch x := v.(type) {
	case string:
		if strings.HasSuffix(x, s) {
			return 1
		}
	case []any:
		n := 0
		for _, e := range x {
			n += countString(e, s)
		}
		return n
	case map[string]any:
		n := 0
		for _, e := range x {
			n += countString(e, s)
		}
		return n
	}
	return 0
}

// TestLongConversationRoundTrips: a conversation of 240 messages and more
// than 1 MB is one sft row whose messages are the recorded ones, and its
// rl row holds every request.
func TestLongConversationRoundTrips(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("0123456789abcdef", 600) // 9.6 KB per message
	msgs := []string{sys("You are patient.")}
	for i := range 120 {
		if i == 119 {
			msgs = append(msgs, user(fmt.Sprintf("%d %s", i, big)))
			break
		}
		id := fmt.Sprintf("call_%03d", i)
		msgs = append(msgs, user(fmt.Sprintf("%d %s", i, big)), asstCalls(call(id, "get_weather", fmt.Sprintf(`{"city":"c%d"}`, i))), tool(id, unicodeText))
	}
	final := asst("done " + big)
	msgs = append(msgs, final)
	r := convRollout("r-1", "g", 1, msgs...)
	if len(msgs) < 200 {
		t.Fatalf("only %d messages", len(msgs))
	}
	file, m := write(t, sel(dataset.FormatSFT), sliceSource{r})
	if m.Rows != 1 || m.FileBytes < 1<<20 {
		t.Fatalf("rows %d, %d bytes; want one row over 1 MiB", m.Rows, m.FileBytes)
	}
	var row struct {
		Messages []json.RawMessage `json:"messages"`
	}
	if err := json.Unmarshal(lines(t, file)[0], &row); err != nil {
		t.Fatal(err)
	}
	if len(row.Messages) != len(msgs) {
		t.Fatalf("row has %d messages, want %d", len(row.Messages), len(msgs))
	}
	for i := range msgs[:len(msgs)-1] {
		if !sameMessage(t, row.Messages[i], []byte(msgs[i])) {
			t.Fatalf("message %d changed", i)
		}
	}
	if !sameMessage(t, row.Messages[len(msgs)-1], []byte(final)) {
		t.Errorf("the reply changed")
	}
}

// TestDocsShowGoldenRows: docs/datasets.md shows the first row of each
// golden file and the golden manifest, so its examples are real output.
func TestDocsShowGoldenRows(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "datasets.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"sft.jsonl", "dpo.jsonl", "rl.jsonl", "atif.jsonl", "manifest.json"} {
		b, err := os.ReadFile(filepath.Join("testdata", name))
		if err != nil {
			t.Fatal(err)
		}
		want := string(b)
		if strings.HasSuffix(name, ".jsonl") {
			want, _, _ = strings.Cut(want, "\n")
		}
		if !strings.Contains(string(doc), strings.TrimSuffix(want, "\n")) {
			t.Errorf("docs/datasets.md does not show testdata/%s as it is", name)
		}
	}
}
