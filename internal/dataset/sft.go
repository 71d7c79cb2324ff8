package dataset

import (
	"bytes"
	"errors"
	"io"
	"iter"
)

// WriteSFT writes OpenAI chat fine-tuning JSONL (SPEC §9): for each
// training-grade rollout whose reward is at least min_reward, in rollout
// id order, one row per chain, in sequence order:
//
//	{"messages": [request messages…, response message], "tools": […]?, "parallel_tool_calls": bool?}
//
// A rollout is exported whole or not at all: if one of its rows breaks a
// rule of ValidateChat, none is written and the rollout is counted under
// format_invalid:<rule>.
func WriteSFT(w io.Writer, sel Selection, rollouts iter.Seq2[*Rollout, error]) (Manifest, error) {
	s := &sftWriter{min: sel.Filters.minReward()}
	return perRollout(w, sel, rollouts, s.rows)
}

type sftWriter struct {
	min float64
	c   canon
}

func (s *sftWriter) rows(r *Rollout, _ *tally) ([][]byte, string) {
	if rw := r.Reward(); rw == nil || *rw < s.min {
		return nil, ReasonBelowMinReward
	}
	if r.NoChatForm != "" {
		return nil, r.NoChatForm
	}
	s.c.reset()
	defer s.c.reset()
	turns := make([]turn, len(r.Completions))
	for i := range r.Completions {
		t, err := s.c.messages(&r.Completions[i])
		if err != nil {
			return nil, reasonOf(err)
		}
		turns[i] = t
	}
	var rows [][]byte
	for _, i := range Chains(turnMessages(turns)) {
		if err := s.c.rest(&turns[i], &r.Completions[i]); err != nil {
			return nil, reasonOf(err)
		}
		row := chatRow(turns[i])
		if err := ValidateChat(row); err != nil {
			return nil, reasonOf(err)
		}
		rows = append(rows, row)
	}
	return rows, ""
}

// chatRow renders one chain as a chat fine-tuning row.
func chatRow(t turn) []byte {
	n := len(`{"messages":[]}`) + len(t.reply) + len(t.tools) + len(t.parallel) + 32
	for _, m := range t.msgs {
		n += len(m) + 1
	}
	b := make([]byte, 0, n)
	b = append(b, `{"messages":[`...)
	for _, m := range t.msgs {
		b = append(b, m...)
		b = append(b, ',')
	}
	b = append(b, t.reply...)
	b = append(b, ']')
	if t.tools != nil {
		b = append(b, `,"tools":`...)
		b = append(b, t.tools...)
	}
	if t.parallel != nil {
		b = append(b, `,"parallel_tool_calls":`...)
		b = append(b, t.parallel...)
	}
	return append(b, '}')
}

func turnMessages(turns []turn) [][][]byte {
	out := make([][][]byte, len(turns))
	for i, t := range turns {
		out[i] = t.msgs
	}
	return out
}

// Chains returns the indexes, in order, of the requests that end a chain:
// those whose messages are not a prefix of a later request's messages
// (SPEC §9). requests holds each counted completion's request messages in
// sequence order, each message in a form where equal messages have equal
// bytes (canonical JSON). A request that another repeats exactly is a
// prefix of it, so only the last of identical requests ends a chain.
func Chains(requests [][][]byte) []int {
	var out []int
	for i, req := range requests {
		ends := true
		for j := i + 1; j < len(requests); j++ {
			if isPrefix(req, requests[j]) {
				ends = false
				break
			}
		}
		if ends {
			out = append(out, i)
		}
	}
	return out
}

func isPrefix(p, s [][]byte) bool {
	if len(p) > len(s) {
		return false
	}
	for i := range p {
		if !bytes.Equal(p[i], s[i]) {
			return false
		}
	}
	return true
}

// reasonOf is the manifest reason for a refusal.
func reasonOf(err error) string {
	var fe *FormatError
	if errors.As(err, &fe) {
		return fe.Reason()
	}
	return ReasonFormatInvalid + RuleNotJSON
}
