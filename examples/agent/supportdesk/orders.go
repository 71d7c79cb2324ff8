package supportdesk

import (
	"errors"
	"fmt"
	"sort"
	"sync"
)

// Order is one order of the in-memory order system.
type Order struct {
	ID       string  `json:"id"`
	Customer string  `json:"customer"`
	Item     string  `json:"item"`
	Total    float64 `json:"total"`
	Status   string  `json:"status"` // processing, shipped, delivered, cancelled
	RefundID string  `json:"refund_id,omitempty"`
}

// Orders is a small order system held in memory: enough state for the
// agent's tools to succeed, fail and change things.
type Orders struct {
	mu      sync.Mutex
	orders  map[string]*Order
	refunds int
}

// Errors the tools report to the model.
var (
	errNotFound   = errors.New("order not found")
	errNotAllowed = errors.New("not allowed in the order's current status")
)

// NewOrders returns the seeded order system.
func NewOrders() *Orders {
	o := &Orders{orders: map[string]*Order{}}
	for _, ord := range []Order{
		{ID: "A1", Customer: "ada@example.com", Item: "mechanical keyboard", Total: 129.00, Status: "shipped"},
		{ID: "B2", Customer: "grace@example.com", Item: "usb-c hub", Total: 39.50, Status: "processing"},
		{ID: "C3", Customer: "alan@example.com", Item: "noise-cancelling headphones", Total: 249.99, Status: "delivered"},
	} {
		ord := ord
		o.orders[ord.ID] = &ord
	}
	return o
}

// Lookup returns an order.
func (o *Orders) Lookup(id string) (Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ord, ok := o.orders[id]
	if !ok {
		return Order{}, fmt.Errorf("%s: %w", id, errNotFound)
	}
	return *ord, nil
}

// Cancel cancels an order that has not shipped.
func (o *Orders) Cancel(id string) (Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ord, ok := o.orders[id]
	if !ok {
		return Order{}, fmt.Errorf("%s: %w", id, errNotFound)
	}
	if ord.Status != "processing" {
		return *ord, fmt.Errorf("cannot cancel %s, it is %s: %w", id, ord.Status, errNotAllowed)
	}
	ord.Status = "cancelled"
	return *ord, nil
}

// Refund refunds a delivered order once.
func (o *Orders) Refund(id, reason string) (Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ord, ok := o.orders[id]
	if !ok {
		return Order{}, fmt.Errorf("%s: %w", id, errNotFound)
	}
	if ord.Status != "delivered" || ord.RefundID != "" {
		return *ord, fmt.Errorf("cannot refund %s (status %s, refund %q): %w", id, ord.Status, ord.RefundID, errNotAllowed)
	}
	o.refunds++
	ord.RefundID = fmt.Sprintf("rf_%s_%04d", id, o.refunds)
	return *ord, nil
}

// Snapshot returns every order, by id.
func (o *Orders) Snapshot() []Order {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Order, 0, len(o.orders))
	for _, ord := range o.orders {
		out = append(out, *ord)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
