//go:build unix

package cli

import (
	"io"
	"os"

	"github.com/mattn/go-isatty"
	"golang.org/x/sys/unix"
)

// terminalColumns is the width in columns of the terminal w writes to, 0
// when w is not a terminal or the terminal reports no width (some
// consoles, container runtimes and CI pseudo-terminals report 0x0).
func terminalColumns(w io.Writer) int {
	f, ok := w.(*os.File)
	if !ok || !(isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd())) {
		return 0
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return 0
	}
	return int(ws.Col)
}
