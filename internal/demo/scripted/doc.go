// Package scripted is gyre's scripted demo model: an OpenAI-compatible Chat
// Completions server (non-streaming and streaming, with tool calls and
// usage numbers) that plays the example support-desk agent's model
// (examples/agent) deterministically, from the conversation it receives
// alone. It is no language model and says so in every output: its answers,
// its /v1/models list and its errors name it "scripted demo model".
//
// It serves two model names. Candidate ("demo-candidate") behaves as a
// careful support agent: it looks the order up, then cancels only an order
// that has not shipped, refunds only a delivered one, and otherwise says
// why not. Base ("demo-base") makes one known, visible mistake: asked to
// refund or cancel, it acts at once without looking the order up, so it
// refunds or cancels orders it must not touch and its tool calls fail
// (A1 shipped cannot be cancelled, B2 processing cannot be refunded).
// Status questions it answers correctly. Graders such as
// tool_called lookup_order and all_tools_ok catch the mistake.
//
// Both models read infrastructure trouble from a tool's result and say
// so instead of guessing: a tool whose backend is unavailable ("D4's
// order system is not answering … try again later") and a refund the
// payment provider did not confirm ("I cannot tell yet whether the refund
// went through"). TroubleQuestions are the questions that meet it.
//
// gyre demo runs it on loopback as the gateway's upstream; gyre demo
// upstream serves it on its own.
package scripted
