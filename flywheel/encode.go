package flywheel

import (
	"bytes"
	"encoding/json"
)

// marshal is json.Marshal without HTML escaping. The types' MarshalJSON
// methods use it so that "<", ">" and "&" reach the wire as sent, as they do
// through Marshal: encoding/json would otherwise escape them inside a
// MarshalJSON result whatever the outer encoder's setting.
func marshal(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}
