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
	// Trouble is the infrastructure trouble this order meets, by design:
	// "" none, TroubleBackendUnavailable, TroublePaymentTimeout.
	Trouble string `json:"trouble,omitempty"`
}

// The infrastructure trouble of the seeded orders: real systems fail in
// ways that say nothing about the model, and the agent reports them as
// such (see agent.call).
const (
	// TroubleBackendUnavailable: the order's warehouse system does not
	// answer, so no tool can read or change the order (D4).
	TroubleBackendUnavailable = "backend_unavailable"
	// TroublePaymentTimeout: the payment provider takes the order's
	// refund request but does not answer in time, so whether the refund
	// was issued is unknown (E5).
	TroublePaymentTimeout = "payment_timeout"
)

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
	// errBackendUnavailable: the order system could not be reached, so
	// nothing was read or changed. The call failed, and the turn says
	// nothing about the model: the agent excludes it.
	errBackendUnavailable = errors.New("order backend unavailable")
	// errPaymentTimeout: the refund request was sent but not confirmed;
	// it may or may not have been issued. The call's outcome is unknown.
	errPaymentTimeout = errors.New("payment provider timed out")
)

// NewOrders returns the seeded order system.
func NewOrders() *Orders {
	o := &Orders{orders: map[string]*Order{}}
	for _, ord := range []Order{
		{ID: "A1", Customer: "ada@example.com", Item: "mechanical keyboard", Total: 129.00, Status: "shipped"},
		{ID: "B2", Customer: "grace@example.com", Item: "usb-c hub", Total: 39.50, Status: "processing"},
		{ID: "C3", Customer: "alan@example.com", Item: "noise-cancelling headphones", Total: 249.99, Status: "delivered"},
		{ID: "D4", Customer: "edsger@example.com", Item: "standing desk", Total: 489.00, Status: "processing", Trouble: TroubleBackendUnavailable},
		{ID: "E5", Customer: "barbara@example.com", Item: "espresso machine", Total: 319.00, Status: "delivered", Trouble: TroublePaymentTimeout},
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
	ord, err := o.reach(id)
	if err != nil {
		return Order{}, err
	}
	return *ord, nil
}

// reach finds an order in its backend; o.mu is held.
func (o *Orders) reach(id string) (*Order, error) {
	ord, ok := o.orders[id]
	switch {
	case !ok:
		return nil, fmt.Errorf("%s: %w", id, errNotFound)
	case ord.Trouble == TroubleBackendUnavailable:
		return nil, fmt.Errorf("%s: %w: the warehouse system holding the order did not answer", id, errBackendUnavailable)
	}
	return ord, nil
}

// Cancel cancels an order that has not shipped.
func (o *Orders) Cancel(id string) (Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ord, err := o.reach(id)
	if err != nil {
		return Order{}, err
	}
	if ord.Status != "processing" {
		return *ord, fmt.Errorf("cannot cancel %s, it is %s: %w", id, ord.Status, errNotAllowed)
	}
	ord.Status = "cancelled"
	return *ord, nil
}

// Refund refunds a delivered order once. When the payment provider does
// not answer in time the order is left as it was: the refund may have
// been issued or not, and the error says so.
func (o *Orders) Refund(id, reason string) (Order, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	ord, err := o.reach(id)
	if err != nil {
		return Order{}, err
	}
	if ord.Status != "delivered" || ord.RefundID != "" {
		return *ord, fmt.Errorf("cannot refund %s (status %s, refund %q): %w", id, ord.Status, ord.RefundID, errNotAllowed)
	}
	if ord.Trouble == TroublePaymentTimeout {
		return *ord, fmt.Errorf("refund of %s: %w after 10 s: the refund may or may not have been issued", id, errPaymentTimeout)
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
