package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal whose size is cols×rows and returns its
// controller and its terminal end.
func openPTY(t *testing.T, cols, rows uint16) (ptm, pts *os.File) {
	t.Helper()
	ptm, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals: %v", err)
	}
	t.Cleanup(func() { ptm.Close() })
	if err := unix.IoctlSetPointerInt(int(ptm.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatalf("unlock pty: %v", err)
	}
	n, err := unix.IoctlGetUint32(int(ptm.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatalf("pty number: %v", err)
	}
	pts, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open pty: %v", err)
	}
	t.Cleanup(func() { pts.Close() })
	if err := unix.IoctlSetWinsize(int(pts.Fd()), unix.TIOCSWINSZ, &unix.Winsize{Col: cols, Row: rows}); err != nil {
		t.Fatalf("set pty size: %v", err)
	}
	return ptm, pts
}

func TestTerminalColumns(t *testing.T) {
	t.Parallel()
	_, zero := openPTY(t, 0, 0)
	_, wide := openPTY(t, 120, 40)
	f, err := os.CreateTemp(t.TempDir(), "not-a-tty")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for name, tt := range map[string]struct {
		w    io.Writer
		want int
	}{
		"terminal of 0x0":   {zero, 0},
		"terminal of 120":   {wide, 120},
		"regular file":      {f, 0},
		"not a file at all": {&bytes.Buffer{}, 0},
	} {
		if got := terminalColumns(tt.w); got != tt.want {
			t.Errorf("%s: %d columns, want %d", name, got, tt.want)
		}
	}
}

// TestEvalRunProgressOnZeroWidthTerminal checks that gyre eval run under a
// terminal that reports zero columns prints plain progress lines, where a
// bar would draw nothing at all.
func TestEvalRunProgressOnZeroWidthTerminal(t *testing.T) {
	t.Parallel()
	ptm, pts := openPTY(t, 0, 0)
	srv := httptest.NewServer(&scriptHarness{runs: map[string]string{}})
	defer srv.Close()
	dir := t.TempDir()
	suitePath := filepath.Join(dir, "suite.yaml")
	doc := "name: refunds\ncases:\n  - id: refund\n    input: {question: \"Refund order 1042\"}\n    graders: [{contains: Refund}]\n"
	if err := os.WriteFile(suitePath, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	read := make(chan string)
	go func() {
		b, _ := io.ReadAll(ptm) // ends with EIO once the terminal end is closed
		read <- string(b)
	}()
	var stdout bytes.Buffer
	env := func(string) (string, bool) { return "", false }
	code := Run(context.Background(), []string{"--data", filepath.Join(dir, "data"), "eval", "run", suitePath,
		"--harness", srv.URL + "/ok", "--repetitions", "3"}, nil, &stdout, pts, env)
	pts.Close()
	out := strings.ReplaceAll(<-read, "\r\n", "\n")
	if code != 0 {
		t.Fatalf("exit %d, stdout:\n%s\nterminal:\n%s", code, stdout.String(), out)
	}
	for _, want := range []string{"running 3 runs\n", "3/3 runs, pass rate 100.0%, 0 errors\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("terminal output lacks %q:\n%q", want, out)
		}
	}
}
