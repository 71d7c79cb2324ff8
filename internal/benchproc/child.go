package benchproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// MeasureInChild runs this benchmark's own executable with args, which
// make it measure one size and print its result as one JSON line, and
// decodes that line into out. A fresh process per measurement is what
// makes its peak RSS the measurement's alone.
func MeasureInChild(out any, args ...string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	b, err := exec.Command(self, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return fmt.Errorf("%w: %s", err, ee.Stderr)
		}
		return err
	}
	if err := json.Unmarshal(b, out); err != nil {
		return fmt.Errorf("%w: %q", err, b)
	}
	return nil
}
