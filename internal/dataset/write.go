package dataset

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"iter"

	"github.com/gyrehq/gyre/internal/grade"
)

// Source hands a dataset's frozen rollouts to the writers. Both iterators
// yield the same rollouts, read lazily so that memory does not grow with
// the dataset: Rollouts one at a time in increasing id order, Groups one
// group at a time (groups in increasing group id order, rollouts in
// increasing id order within a group). An error ends the build; the file
// is then not a dataset and must be discarded.
type Source interface {
	Rollouts() iter.Seq2[*Rollout, error]
	Groups() iter.Seq2[[]*Rollout, error]
}

// ErrOrder is returned when a Source yields rollouts out of order (or a
// rollout twice), which would make the file depend on the order of reads.
var ErrOrder = errors.New("dataset: rollouts out of order")

func errOrder(prev, next string) error {
	return fmt.Errorf("%w: %q after %q", ErrOrder, next, prev)
}

// Write builds the dataset sel describes from src onto w and returns its
// manifest. It writes rows as it reads rollouts; on error what was
// written is incomplete and must be discarded (the caller writes to a
// temporary file or blob and publishes it only on success).
func Write(w io.Writer, sel Selection, src Source) (Manifest, error) {
	if err := sel.Validate(); err != nil {
		return Manifest{}, err
	}
	switch sel.Format {
	case FormatSFT:
		return WriteSFT(w, sel, src.Rollouts())
	case FormatDPO:
		return WriteDPO(w, sel, src.Groups())
	case FormatRL:
		return WriteRL(w, sel, src.Rollouts())
	default:
		return WriteATIF(w, sel, src.Rollouts())
	}
}

// perRollout is the loop shared by the formats with rows per rollout:
// rows returns the rollout's rows, or the reason it has none.
func perRollout(w io.Writer, sel Selection, rollouts iter.Seq2[*Rollout, error], rows func(*Rollout, *tally) ([][]byte, string)) (Manifest, error) {
	t := newTally(sel)
	out := newFileWriter(w)
	holdout := holdoutSet(sel)
	for r, err := range rollouts {
		if err != nil {
			return Manifest{}, err
		}
		if err := t.selected(r); err != nil {
			return Manifest{}, err
		}
		reason, pending := eligibility(r, holdout)
		if pending {
			t.pending()
			continue
		}
		if reason != "" {
			t.notExported(reason)
			continue
		}
		lines, reason := rows(r, t)
		if reason != "" {
			t.notExported(reason)
			continue
		}
		if len(lines) == 0 {
			t.notExported(grade.NotGradeNoCompletions)
			continue
		}
		for _, l := range lines {
			if err := out.line(l); err != nil {
				return Manifest{}, err
			}
		}
		t.m.Rows += len(lines)
		t.exported(r)
	}
	sum, n, err := out.close()
	if err != nil {
		return Manifest{}, err
	}
	return t.finish(sum, n)
}

// eligibility says why a rollout is left out before any format rule:
// pending when its training grade was undecided at creation, otherwise a
// reason ("" when it may be exported).
func eligibility(r *Rollout, holdout map[string]bool) (reason string, pending bool) {
	switch {
	case r.TrainingGrade == nil:
		return "", true
	case holdout[r.TaskID]:
		return ReasonHeldOut, false
	case !*r.TrainingGrade:
		if len(r.NotTrainingGradeReasons) > 0 {
			return r.NotTrainingGradeReasons[0], false
		}
		return ReasonNotTrainingGrade, false
	case r.Unavailable != "":
		return r.Unavailable, false
	}
	return "", false
}

// holdoutSet is the set of tasks held out of sel, empty when the
// selection includes them.
func holdoutSet(sel Selection) map[string]bool {
	set := map[string]bool{}
	if sel.Filters.IncludeHoldout {
		return set
	}
	for _, id := range sel.HoldoutTaskIDs {
		set[id] = true
	}
	return set
}

// fileWriter writes rows through a buffer while hashing and counting them.
type fileWriter struct {
	buf *bufio.Writer
	h   hash.Hash
	n   int64
	esc []byte
}

func newFileWriter(w io.Writer) *fileWriter {
	f := &fileWriter{h: sha256.New()}
	f.buf = bufio.NewWriterSize(io.MultiWriter(w, f.h), 64<<10)
	return f
}

// line writes one row, a JSON text without a newline, and its newline.
func (f *fileWriter) line(row []byte) error {
	f.esc = escapeLineSeparators(f.esc[:0], row)
	f.esc = append(f.esc, '\n')
	n, err := f.buf.Write(f.esc)
	f.n += int64(n)
	return err
}

func (f *fileWriter) close() (string, int64, error) {
	if err := f.buf.Flush(); err != nil {
		return "", 0, err
	}
	return hex.EncodeToString(f.h.Sum(nil)), f.n, nil
}

// escapeLineSeparators appends row to dst with U+2028 and U+2029 written
// as JSON escapes. In JSON text they can only occur inside strings, where
// the escape means the same character, so the row decodes to the same
// value; Python's str.splitlines and some JSONL readers split lines on
// them otherwise.
func escapeLineSeparators(dst, row []byte) []byte {
	for {
		i := indexLineSeparator(row)
		if i < 0 {
			return append(dst, row...)
		}
		dst = append(dst, row[:i]...)
		if row[i+2] == 0xA8 {
			dst = append(dst, `\u2028`...)
		} else {
			dst = append(dst, `\u2029`...)
		}
		row = row[i+3:]
	}
}

// indexLineSeparator returns the offset of the first U+2028 or U+2029
// (E2 80 A8 / E2 80 A9) in b, or -1.
func indexLineSeparator(b []byte) int {
	off := 0
	for {
		i := bytes.IndexByte(b[off:], 0xE2)
		if i < 0 {
			return -1
		}
		i += off
		if i+2 < len(b) && b[i+1] == 0x80 && (b[i+2] == 0xA8 || b[i+2] == 0xA9) {
			return i
		}
		off = i + 1
	}
}
