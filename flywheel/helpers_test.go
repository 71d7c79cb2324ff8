package flywheel_test

import (
	"errors"

	"github.com/gyrehq/gyre/flywheel"
)

func asValidationError(err error, target **flywheel.ValidationError) bool {
	return errors.As(err, target)
}
