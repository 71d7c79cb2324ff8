// Command gyre is the gyre binary: the control plane (gyre serve) and its
// operator commands. See docs/cli.md.
package main

import (
	"os"

	"github.com/gyrehq/gyre/internal/cli"
)

func main() { os.Exit(cli.Main()) }
