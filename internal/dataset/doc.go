// Package dataset turns training-grade rollouts into the files a trainer
// reads (SPEC §9): OpenAI chat fine-tuning JSONL (sft), OpenAI preference
// JSONL (dpo), one row of per-completion traffic per rollout (rl) and one
// ATIF document per rollout (atif), each with a Manifest.
//
// This package is the pure core of datasets. It owns the domain types (a
// dataset's frozen Selection, the per-rollout input the writers read, the
// Manifest), the rules (which rollouts a format exports, what a chain is,
// which pairs a group yields, where two conversations diverge) and a
// validator written from OpenAI's published fine-tuning data format rules.
// Reading the recorded calls back from the store, the durable build job,
// the API and the CLI sit outside it and feed it through a Source.
//
// Writers stream: they take rollouts one at a time (dpo: one group at a
// time) and write rows as they go while hashing them, so the memory they
// use follows the largest rollout, not the dataset; only the manifest's
// lists of selected rollout ids and held-out task ids grow with it. The same input always gives
// the same bytes: every embedded JSON value is written in its RFC 8785
// canonical form (members sorted, numbers as ECMAScript writes them,
// strings exactly as recorded), rows in a fixed member order, one
// \n-terminated UTF-8 line each, with U+2028 and U+2029 escaped so that
// readers which split lines on them still see one row per line. Chat rows
// (sft, dpo) leave out message members that say nothing (null, an empty
// annotations), which OpenAI's format does not have; rl rows keep the
// traffic exactly.
//
// The agent's advisory reward and success never reach a row: the input has
// no field for them, and rewards come only from the server's frozen
// verdict set.
package dataset
