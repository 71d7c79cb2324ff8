package gateway

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// TestDeliveryConn_ReportsTheNextWriteOnce: a report is made once, with
// the result of the first write after it was asked for, or net.ErrClosed
// if the connection closes first; a later write or close reports nothing.
func TestDeliveryConn_ReportsTheNextWriteOnce(t *testing.T) {
	boom := errors.New("boom")
	cases := []struct {
		name    string
		writeOK bool
		steps   string // w: write, r: ReadFrom, c: close
		want    []error
	}{
		{"write succeeds", true, "ww", []error{nil}},
		{"write fails", false, "w", []error{boom}},
		{"closed before a write", true, "cw", []error{net.ErrClosed}},
		{"written then closed", true, "wc", []error{nil}},
		{"read from a reader", true, "rw", []error{nil}},
		{"read from a reader fails", false, "r", []error{boom}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, b := net.Pipe()
			defer b.Close()
			go func() {
				buf := make([]byte, 64)
				for {
					if _, err := b.Read(buf); err != nil {
						return
					}
				}
			}()
			var inner net.Conn = a
			if !tc.writeOK {
				inner = failingConn{a, boom}
			}
			dc := &deliveryConn{Conn: inner}
			_, _ = dc.Write([]byte("before")) // not reported: nobody asked yet
			var got []error
			dc.afterNextWrite(func(err error) { got = append(got, err) })
			for _, s := range tc.steps {
				switch s {
				case 'w':
					_, _ = dc.Write([]byte("x"))
				case 'r':
					_, _ = dc.ReadFrom(strings.NewReader("x"))
				default:
					_ = dc.Close()
				}
			}
			_ = dc.Close()
			if len(got) != len(tc.want) {
				t.Fatalf("reports %v, want %v", got, tc.want)
			}
			for i := range got {
				if !errors.Is(got[i], tc.want[i]) && got[i] != tc.want[i] {
					t.Errorf("report %d = %v, want %v", i, got[i], tc.want[i])
				}
			}
		})
	}
}

type failingConn struct {
	net.Conn
	err error
}

func (c failingConn) Write([]byte) (int, error) { return 0, c.err }
