// Package ui is gyre serve's web UI under /ui/ (SPEC §11): server-rendered
// html/template pages over the same tenant-bound store methods the admin
// API uses, htmx for live refresh, every asset embedded, charts as SVG
// (package chart). Sign-in exchanges a reader or admin key for a
// server-side session (store.UISessionStore) whose cookie is scoped to
// /ui/ and never accepted anywhere else; every response carries a strict
// Content-Security-Policy, and every state-changing form a CSRF token.
package ui
