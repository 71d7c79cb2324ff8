package flywheel_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gyrehq/gyre/flywheel"
)

// realisticBatch is a 64-turn ProductionTurnBatch in which every turn
// carries three tool calls with arguments, outputs and entity ids, as a busy
// support agent would send.
func realisticBatch() []byte {
	var b strings.Builder
	b.WriteString(`{"agent_id":"support-bot.eu-west","turns":[`)
	for i := range 64 {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"turn_id":"turn-%05d","task_id":"ticket/%d","conversation_id":"conv-%d","turn_index":%d,`+
			`"input_text":"Hi, my order #%d still has not arrived — can you check where it is?",`+
			`"final_text":"Your order #%d left the warehouse yesterday and should arrive by Friday.",`+
			`"tool_calls":[`+
			`{"name":"lookup_order","arguments":{"order_id":%d,"include":["shipments","items"]},"outcome":"ok","status_code":200,"output":{"status":"shipped","carrier":"DHL","eta":"2025-02-07"},"latency_ms":41.5,"agent_name":"orders","tool_call_id":"call_%da","entity_ids":{"id":"ord_%d"}},`+
			`{"name":"track_shipment","arguments":{"carrier":"DHL","tracking":"JD0146000033%d"},"outcome":"unknown","status_code":null,"output":"in transit","error":null,"latency_ms":120,"tool_call_id":"call_%db"},`+
			`{"name":"add_note","arguments":{"ticket":"T-%d","text":"customer informed"},"outcome":"failed","status_code":409,"error":"note already exists","error_class":"Conflict","latency_ms":12.25,"agent_name":null,"tool_call_id":null,"entity_ids":{}}`+
			`],"tool_calls_omitted_count":0,"agent_fingerprint":{"sdk":"gyre-go/0.1.0","skills":["orders","shipping"]},"occurred_at":"2025-01-31T12:%02d:00Z"}`,
			i, i, i%7, i, 1000+i, 1000+i, 1000+i, i, 1000+i, i, i, i, i%60)
	}
	b.WriteString(`]}`)
	return []byte(b.String())
}

func BenchmarkValidateProductionTurnBatch64(b *testing.B) {
	raw := realisticBatch()
	v, err := flywheel.NewValidator()
	if err != nil {
		b.Fatal(err)
	}
	if err := v.Validate(flywheel.DefProductionTurnBatch, raw); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(flywheel.DefProductionTurnBatch, raw); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidateProductionTurnBatch64Invalid measures the error path:
// every turn has a violation, so the explainer orders 64 of them.
func BenchmarkValidateProductionTurnBatch64Invalid(b *testing.B) {
	raw := []byte(strings.ReplaceAll(string(realisticBatch()), `"status_code":null`, `"status_code":200`))
	v, err := flywheel.NewValidator()
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(raw)))
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(flywheel.DefProductionTurnBatch, raw); err == nil {
			b.Fatal("valid")
		}
	}
}

func BenchmarkValidateRolloutOutput(b *testing.B) {
	raw := []byte(`{"final_text":"4","tool_calls":[{"name":"calculator","arguments":{"expr":"2+2"},"outcome":"ok","status_code":null,"output":4,"latency_ms":3.25,"tool_call_id":"call_1"}],"tool_calls_omitted_count":0,"llm_call_count":2,"artifacts":{"answer.txt":{"sha256":"4b227777d4dd1fc61c6f884f48641d02b4d121d3fd328cb08b5531fcacdabf8a","size_bytes":1,"content":"4"}},"reward":0.75,"success":true,"exclusion":null}`)
	v, err := flywheel.NewValidator()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := v.Validate(flywheel.DefRolloutOutput, raw); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRealisticBatchIsValid(t *testing.T) {
	t.Parallel()
	if err := flywheel.Validate(flywheel.DefProductionTurnBatch, realisticBatch()); err != nil {
		t.Fatal(err)
	}
}
