package dataset

import (
	"encoding/json"
	"fmt"
	"io"
	"iter"
	"math"

	"github.com/gyrehq/gyre/internal/grade"
)

// marginSlack absorbs the rounding of a reward difference, so that rewards
// of 0.7 and 0.2 differ by the margin 0.5 as written.
const marginSlack = 1e-9

// WriteDPO writes OpenAI preference JSONL (SPEC §9). Within each group,
// for every pair of training-grade rollouts (in rollout id order) whose
// rewards differ by at least min_margin, the higher preferred, it writes
//
//	{"input": {"messages": [shared prefix…], "tools": […]?, "parallel_tool_calls": bool?},
//	 "preferred_output": [assistant message], "non_preferred_output": [assistant message]}
//
// A rollout's conversation is its last counted completion's request
// messages plus the response message. The input is the conversations'
// shared prefix, messages compared with tool call ids normalised (see
// Diverge), taken from the preferred rollout with its own ids and tools;
// each output is the single assistant message where they first differ.
// Groups with no such pair (all pass, all fail, one rollout) give no row
// and are counted in groups_without_pairs; a training-grade rollout in no
// written pair is counted under no_pair; pairs left out for another reason
// are counted in pairs_not_exported_by_reason.
func WriteDPO(w io.Writer, sel Selection, groups iter.Seq2[[]*Rollout, error]) (Manifest, error) {
	t := newTally(sel)
	t.grouped = true
	out := newFileWriter(w)
	holdout := holdoutSet(sel)
	margin := sel.Filters.minMargin()
	var c canon
	lastGroup := ""
	for group, err := range groups {
		if err != nil {
			return Manifest{}, err
		}
		if len(group) == 0 {
			continue
		}
		if g := group[0].GroupID; g == "" || g <= lastGroup && lastGroup != "" {
			return Manifest{}, fmt.Errorf("%w: group %q after %q", ErrOrder, g, lastGroup)
		}
		lastGroup = group[0].GroupID
		t.startGroup()
		var cands []*candidate
		for _, r := range group {
			if err := t.selected(r); err != nil {
				return Manifest{}, err
			}
			if r.GroupID != lastGroup {
				return Manifest{}, fmt.Errorf("%w: rollout %q of group %q among group %q", ErrOrder, r.ID, r.GroupID, lastGroup)
			}
			reason, pending := eligibility(r, holdout)
			switch {
			case pending:
				t.pending()
				continue
			case reason != "":
				t.notExported(reason)
				continue
			}
			cand, reason := newCandidate(&c, r)
			if reason != "" {
				t.notExported(reason)
				continue
			}
			cands = append(cands, cand)
		}
		rows := 0
		for i := range cands {
			for j := i + 1; j < len(cands); j++ {
				pref, non := cands[i], cands[j]
				if math.Abs(pref.reward-non.reward) < margin-marginSlack {
					continue
				}
				if non.reward > pref.reward {
					pref, non = non, pref
				}
				row, reason := preferenceRow(pref, non)
				if reason != "" {
					t.m.PairsNotExportedByReason[reason]++
					continue
				}
				if err := out.line(row); err != nil {
					return Manifest{}, err
				}
				rows++
				pref.paired, non.paired = true, true
			}
		}
		if rows == 0 {
			*t.m.GroupsWithoutPairs++
		}
		t.m.Rows += rows
		for _, cand := range cands {
			if cand.paired {
				t.exported(cand.r)
			} else {
				t.notExported(ReasonNoPair)
			}
		}
	}
	sum, n, err := out.close()
	if err != nil {
		return Manifest{}, err
	}
	return t.finish(sum, n)
}

// candidate is a training-grade rollout of a group with its conversation.
type candidate struct {
	r      *Rollout
	reward float64
	// conv is the conversation: the last request's messages and the reply.
	conv [][]byte
	// keys are conv's messages with tool call ids normalised; roles their
	// roles.
	keys  []string
	roles []string
	last  turn
	// paired: the rollout is in a written pair.
	paired bool
}

func newCandidate(c *canon, r *Rollout) (*candidate, string) {
	reward := r.Reward()
	if reward == nil {
		return nil, grade.NotGradeNoVerdict
	}
	if len(r.Completions) == 0 {
		return nil, grade.NotGradeNoCompletions
	}
	if r.NoChatForm != "" {
		return nil, r.NoChatForm
	}
	c.reset()
	last, err := c.turn(&r.Completions[len(r.Completions)-1])
	c.reset()
	if err != nil {
		return nil, reasonOf(err)
	}
	cand := &candidate{r: r, reward: *reward, last: last}
	cand.conv = append(append(cand.conv, last.msgs...), last.reply)
	n := newNormalizer()
	for _, m := range cand.conv {
		k, err := n.message(m)
		if err != nil {
			return nil, reasonOf(err)
		}
		var role struct {
			Role string `json:"role"`
		}
		_ = json.Unmarshal(m, &role) // canonical JSON; a non-object has no role
		cand.keys = append(cand.keys, k)
		cand.roles = append(cand.roles, role.Role)
	}
	return cand, ""
}

// Diverge returns the index of the first message at which two
// conversations differ, comparing normalised messages (keys), and whether
// that message is an assistant message in both, which is what a
// preference pair needs: a shared prefix that both outputs answer. It
// returns false when one conversation continues the other.
func Diverge(keysA, rolesA, keysB, rolesB []string) (int, bool) {
	n := min(len(keysA), len(keysB))
	for k := range n {
		if keysA[k] != keysB[k] {
			return k, rolesA[k] == "assistant" && rolesB[k] == "assistant"
		}
	}
	return n, false
}

// preferenceRow renders one pair, or the reason it is left out.
func preferenceRow(pref, non *candidate) ([]byte, string) {
	k, ok := Diverge(pref.keys, pref.roles, non.keys, non.roles)
	if !ok || k == 0 {
		return nil, ReasonNoDivergentAssistantTurn
	}
	b := make([]byte, 0, 256)
	b = append(b, `{"input":{"messages":[`...)
	for i, m := range pref.conv[:k] {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, m...)
	}
	b = append(b, ']')
	if pref.last.tools != nil {
		b = append(b, `,"tools":`...)
		b = append(b, pref.last.tools...)
	}
	if pref.last.parallel != nil {
		b = append(b, `,"parallel_tool_calls":`...)
		b = append(b, pref.last.parallel...)
	}
	b = append(b, `},"preferred_output":[`...)
	b = append(b, pref.conv[k]...)
	b = append(b, `],"non_preferred_output":[`...)
	b = append(b, non.conv[k]...)
	b = append(b, "]}"...)
	if err := ValidatePreference(b); err != nil {
		return nil, reasonOf(err)
	}
	return b, ""
}
