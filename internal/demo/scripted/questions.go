package scripted

import (
	"fmt"
	"regexp"
	"strings"
)

// Kind is what a customer asks for.
type Kind string

// The request kinds the scripted model understands.
const (
	KindRefund Kind = "refund"
	KindCancel Kind = "cancel"
	KindStatus Kind = "status"
)

// Orders are the seeded orders of the example agent's order system, with
// their status.
var Orders = []struct{ ID, Status string }{
	{"A1", "shipped"},
	{"B2", "processing"},
	{"C3", "delivered"},
}

// phrasings are the ways a customer asks, per kind; %s is the order id.
var phrasings = map[Kind][]string{
	KindRefund: {
		"Please refund order %s, it arrived broken.",
		"I want my money back for order %s.",
		"Can I get a refund on %s? It stopped working.",
	},
	KindCancel: {
		"Cancel order %s please.",
		"I changed my mind, please cancel %s.",
		"Could you cancel my order %s?",
	},
	KindStatus: {
		"Where is my order %s?",
		"What is the status of order %s?",
		"Has %s shipped yet?",
	},
}

// Question is one customer message the scripted model understands.
type Question struct {
	// ID is stable and unique: kind, order and phrasing, e.g. refund-C3-1.
	ID    string
	Text  string
	Order string
	Kind  Kind
	// BaseMistake says whether demo-base gets it wrong (it refunds or
	// cancels without looking the order up); demo-candidate never does.
	BaseMistake bool
}

// Questions returns every question the scripted model understands, in a
// stable order (phrasing, then kind, then order), so that a prefix of the
// list spreads over kinds and orders: 3 orders × 3 kinds × 3 phrasings.
func Questions() []Question {
	var out []Question
	for p := range 3 {
		for _, k := range []Kind{KindRefund, KindCancel, KindStatus} {
			for _, o := range Orders {
				out = append(out, Question{
					ID:   fmt.Sprintf("%s-%s-%d", k, o.ID, p+1),
					Text: fmt.Sprintf(phrasings[k][p], o.ID), Order: o.ID, Kind: k,
					BaseMistake: k != KindStatus,
				})
			}
		}
	}
	return out
}

var orderIDRE = regexp.MustCompile(`\b[A-Z][0-9]\b`)

// classify reads the order id and the request kind from a customer message.
func classify(text string) (order string, kind Kind) {
	order = orderIDRE.FindString(text)
	low := strings.ToLower(text)
	switch {
	case strings.Contains(low, "refund") || strings.Contains(low, "money back"):
		kind = KindRefund
	case strings.Contains(low, "cancel"):
		kind = KindCancel
	case strings.Contains(low, "where") || strings.Contains(low, "status") || strings.Contains(low, "shipped") || strings.Contains(low, "track"):
		kind = KindStatus
	}
	return order, kind
}
