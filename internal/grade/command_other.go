//go:build !unix

package grade

import "os/exec"

func isolate(*exec.Cmd)   {}
func killGroup(*exec.Cmd) {}
