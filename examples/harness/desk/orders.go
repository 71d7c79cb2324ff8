package desk

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// order is one order of the shop's in-memory order system.
type order struct {
	ID       string `json:"order_id"`
	Customer string `json:"customer"`
	Item     string `json:"item"`
	Cents    int    `json:"-"`
	Amount   string `json:"amount"`
	Status   string `json:"status"` // processing, shipped, delivered
	Refunded bool   `json:"refunded"`
}

// orderBook is the order system one run sees. Every run gets a fresh copy,
// so that repeated runs of one case start from the same state.
type orderBook struct {
	orders map[string]*order
}

func newOrderBook() *orderBook {
	b := &orderBook{orders: map[string]*order{}}
	for _, o := range []order{
		{ID: "1042", Customer: "Ada Lovelace", Item: "Ceramic teapot", Cents: 5990, Status: "delivered"},
		{ID: "1043", Customer: "Grace Hopper", Item: "Mechanical keyboard", Cents: 12900, Status: "shipped"},
		{ID: "1044", Customer: "Alan Turing", Item: "Chess set", Cents: 4550, Status: "processing"},
		{ID: "1045", Customer: "Ada Lovelace", Item: "Tea cups (set of 4)", Cents: 2400, Status: "delivered", Refunded: true},
	} {
		o.Amount = money(o.Cents)
		b.orders[o.ID] = &o
	}
	return b
}

func money(cents int) string { return fmt.Sprintf("%d.%02d USD", cents/100, cents%100) }

// refund is the outcome of issue_refund.
type refund struct {
	RefundID string `json:"refund_id"`
	OrderID  string `json:"order_id"`
	Amount   string `json:"amount"`
	Receipt  string `json:"receipt"`
}

// issueRefund refunds a delivered, not yet refunded order in full.
func (b *orderBook) issueRefund(id string) (*order, error) {
	o, ok := b.orders[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("no order %s", id)
	case o.Refunded:
		return nil, fmt.Errorf("order %s was already refunded", id)
	case o.Status != "delivered":
		return nil, fmt.Errorf("order %s is %s: only delivered orders can be refunded", id, o.Status)
	}
	o.Refunded = true
	return o, nil
}

// receipt is the text of a refund receipt.
func receipt(r refund, o *order, reason string, at time.Time) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "Refund receipt\n\n")
	fmt.Fprintf(&b, "Refund:   %s\n", r.RefundID)
	fmt.Fprintf(&b, "Order:    %s (%s)\n", o.ID, o.Item)
	fmt.Fprintf(&b, "Customer: %s\n", o.Customer)
	fmt.Fprintf(&b, "Amount:   %s\n", r.Amount)
	fmt.Fprintf(&b, "Reason:   %s\n", reason)
	fmt.Fprintf(&b, "Issued:   %s\n", at.UTC().Format(time.RFC3339))
	return []byte(b.String())
}

// toJSON renders a tool result.
func toJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return `{"error":"cannot encode the result"}`
	}
	return string(b)
}
