// Package chart renders the web UI's charts as server-side SVG: a line
// chart over time, a horizontal bar chart of categories and a histogram.
// Every chart carries a <title> and <desc>, readable axes and labels, a
// data table as its text alternative, and a sentence instead of an empty
// drawing when there is no data. All text is escaped; styling comes from
// classes (the page's stylesheet), never from style attributes, so a
// strict Content-Security-Policy blocks nothing.
package chart
