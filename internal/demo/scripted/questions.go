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

// Orders are the seeded orders of the example agent's order system whose
// systems work, with their status.
var Orders = []struct{ ID, Status string }{
	{"A1", "shipped"},
	{"B2", "processing"},
	{"C3", "delivered"},
}

// Trouble is infrastructure trouble an order of the example agent meets by
// design: it says nothing about the model.
type Trouble string

// The example agent's troubles (examples/agent/supportdesk).
const (
	// TroubleBackendUnavailable: D4's warehouse system does not answer;
	// the agent fails the call and excludes the turn
	// (substrate_unavailable).
	TroubleBackendUnavailable Trouble = "backend_unavailable"
	// TroublePaymentTimeout: E5's refund is sent but the payment provider
	// does not confirm it in time; the agent reports the call's outcome as
	// unknown, so outcome graders abstain.
	TroublePaymentTimeout Trouble = "payment_timeout"
)

// TroubleOrders are the seeded orders whose systems are in trouble, with
// their status and trouble.
var TroubleOrders = []struct {
	ID, Status string
	Trouble    Trouble
}{
	{"D4", "processing", TroubleBackendUnavailable},
	{"E5", "delivered", TroublePaymentTimeout},
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
	// Trouble is the order's infrastructure trouble, "" when none.
	Trouble Trouble
}

// Questions returns the questions about the orders whose systems work,
// in a stable order (phrasing, then kind, then order), so that a prefix of the
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

// TroubleQuestions returns the questions about the orders in trouble, in
// a stable order: D4's status and cancellation (its backend does not
// answer) and E5's refund (the payment provider times out). They are not
// among Questions, so production traffic made from Questions stays clear
// of them.
func TroubleQuestions() []Question {
	var out []Question
	for _, o := range TroubleOrders {
		kinds := []Kind{KindStatus, KindCancel}
		if o.Trouble == TroublePaymentTimeout {
			kinds = []Kind{KindRefund}
		}
		for _, k := range kinds {
			out = append(out, Question{
				ID:   fmt.Sprintf("%s-%s-1", k, o.ID),
				Text: fmt.Sprintf(phrasings[k][0], o.ID), Order: o.ID, Kind: k,
				BaseMistake: k != KindStatus, Trouble: o.Trouble,
			})
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
