// Package textmerge merges text line by line: the three-way merge of a
// file changed on two sides of a common base.
//
// Each side is compared with the base by a line diff (Options.Diff: Myers'
// O(ND) algorithm in linear space, after the common head and tail are set
// aside, as git merge-file; or git's histogram diff, as git merge), whose
// changes are then slid as git's diff slides them (xdiff's change
// compaction): a run of changed lines that equal lines around it let sit
// at several places goes as far down as it can, then back up to end with a
// change of the other file if it met one. Both sides' diffs thus place an
// identical change (a patch both applied, a cherry-pick) alike whatever
// surrounds it, and it merges as one. A change of one side only is taken;
// the same change on both sides is taken once; changes of the two sides
// that overlap in the base, or touch (one ends where the other starts, or
// both insert at one place), conflict unless they give the same lines.
// Within a conflict the lines both sides agree on are taken out of it, and
// conflicts separated by three lines or fewer are joined, so that the
// markers
//
//	<<<<<<< ours
//	ours' lines
//	=======
//	theirs' lines
//	>>>>>>> theirs
//
// enclose only what disagrees. These are the rules of git's merge (xdiff
// at its "zealous" level, the style without the base's lines), so that a
// text git merges cleanly merges here to the same bytes, and one git finds
// conflicted conflicts here: a differential test in package commit checks
// that against git itself.
//
// Lines end at '\n' (a last line may have none, and is then a line of its
// own kind: "x" and "x\n" differ); carriage returns are bytes like any
// other. A file is text when its first 8,000 bytes hold no NUL byte (git's
// rule); callers merge binary files otherwise (see commit.Merge).
package textmerge
