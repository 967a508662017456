// The fixed scripts the file operations run in a sandbox, each after a first line
// `set -- ARGS` that carries every path and pattern as an argument, never as script text. Being
// fixed, they are what a sandbox that keeps a shell open can hold ready (command_scripts). Internal.
#pragma once

#include <array>
#include <string_view>

namespace kubesandbox::files {

// ls: OK, then d<name> or f<name> per entry, NUL-terminated; or E <reason>.
inline constexpr std::string_view ls_script = R"SH(export LC_ALL=C
exec 2>/dev/null
p=$1
[ -e "$p" ] || { echo 'E path_not_found'; exit 0; }
[ -d "$p" ] || { echo 'E not_a_directory'; exit 0; }
{ cd -- "$p" && [ -r . ]; } || { echo 'E permission_denied'; exit 0; }
echo OK
for e in * .[!.]* ..?*; do
  if [ -d "$e" ] && [ ! -L "$e" ]; then printf 'd%s\000' "$e"
  elif [ -e "$e" ] || [ -L "$e" ]; then printf 'f%s\000' "$e"; fi
done
)SH";

// delete: OK, E not_found, or F<what rm said> with status 1.
inline constexpr std::string_view delete_script = R"SH(p=$1
{ [ -e "$p" ] || [ -L "$p" ]; } || { echo 'E not_found'; exit 0; }
out=$(rm -rf -- "$p" 2>&1) && { echo OK; exit 0; }
printf 'F%s' "$out"
exit 1
)SH";

// Prints R<real root>, the regular files (./rel), an empty record, pairs of (symlink, target)
// for symlinks to regular files, then X<status of both walks>; all NUL-terminated.
inline constexpr std::string_view glob_script = R"SH(export LC_ALL=C
r=$1; shift
exec 2>/dev/null
[ -e "$r" ] || { echo 'E path_not_found'; exit 0; }
[ -d "$r" ] || { echo 'E not_a_directory'; exit 0; }
{ cd -- "$r" && [ -r . ]; } || { echo 'E permission_denied'; exit 0; }
printf 'R%s\000' "$(pwd -P)"
if [ $# -eq 0 ]; then set -- -name '*'; else
  n=$#; for x do set -- "$@" -o -name "$x"; done; shift "$n"; shift
fi
find . -type f \( "$@" \) -print0; a=$?
printf '\000'
find . -type l \( "$@" \) -exec sh -c 'for l do [ -f "$l" ] && printf "%s\000%s\000" "$l" "$(readlink -f "$l")"; done; true' sh {} +
b=$?
printf 'X%s %s\000' "$a" "$b"
)SH";

// Prints D (a folder) or F (one file), then one record per matching line:
// <length of name>:<name>:<line number>:<text>\n, the name as find printed it (./rel); then B
// and one <length>:<name> line per file holding a NUL byte (binary: the client drops its lines).
// awk names each file with a match once on fd 3 for that check.
inline constexpr std::string_view grep_script = R"SH(export LC_ALL=C
r=$1; KSB_PATTERN=$2; KSB_MAX=$3; export KSB_PATTERN KSB_MAX; shift 3
exec 2>/dev/null
prog='BEGIN { p = ENVIRON["KSB_PATTERN"]; n = split(p, ps, "\n"); m = ENVIRON["KSB_MAX"] + 0 }
{ hit = (p == ""); for (i = 1; !hit && i <= n; i++) if (ps[i] == "" || index($0, ps[i])) hit = 1 }
hit { printf "%d:%s:%d:%s\n", length(FILENAME), FILENAME, FNR, $0
  if (FILENAME != last) { last = FILENAME; printf "%d:%s\n", length(FILENAME), FILENAME > "/dev/fd/3" }
  if (m && ++c >= m) exit }'
# (dash ends the shell on an empty $((...)), hence the checks before the arithmetic)
binary() { n=$(wc -c < "$1") && m=$(tr -d '\000' < "$1" | wc -c) && [ "$((n))" -ne "$((m))" ]; }
[ -e "$r" ] || { echo 'E path_not_found'; exit 0; }
if [ ! -d "$r" ]; then
  [ -r "$r" ] || { echo 'E permission_denied'; exit 0; }
  echo F
  binary "$r" || awk "$prog" < "$r" 3>/dev/null
  exit 0
fi
{ cd -- "$r" && [ -r . ]; } || { echo 'E permission_denied'; exit 0; }
echo D
if [ $# -eq 0 ]; then set -- -name '*'; else
  n=$#; for x do set -- "$@" -o -name "$x"; done; shift "$n"; shift
fi
exec 4>&1
bins=$(find . -type f \( "$@" \) -exec awk "$prog" {} + 3>&1 1>&4 | while IFS= read -r rec; do
  binary "${rec#*:}" && printf '%s\n' "$rec"
done)
printf 'B\n%s' "$bins"
exit 0
)SH";

// read ($1 path, $2 text or binary, $3 first line, $4 lines, $5 "large" or nothing): E <reason>,
// or W and the file's first 512,001 bytes, one program started where `wc` and `cat` were two
// (about 1.3 ms in a pod). More than 512,000 of them tell a large file, read again with $5 large:
// W <size> and the whole file when it shrank meanwhile; B <size> for a large binary file; else
// L <size>, its first 8 KiB, N <lines> <ends with a newline> (N - when not counted) and the page.
inline constexpr std::string_view read_script = R"SH(export LC_ALL=C
exec 2>/dev/null
f=$1
[ -e "$f" ] || { echo 'E file_not_found'; exit 0; }
[ -f "$f" ] || { echo 'E not_a_file'; exit 0; }
[ -r "$f" ] || { echo 'E permission_denied'; exit 0; }
if [ "$5" != large ]; then { echo W; exec head -c 512001; } < "$f" || echo 'E permission_denied'; exit 0; fi
s=$(wc -c < "$f") || { echo 'E permission_denied'; exit 0; }
s=$((s))
if [ "$s" -le 512000 ]; then echo "W $s"; exec cat < "$f"; fi
if [ "$2" != text ]; then echo "B $s"; exit 0; fi
cr=$(printf '\r')
norm() { sed "s/$cr\$//" < "$f" | tr '\015' '\012'; }
echo "L $s"
head -c 8192 < "$f"
if [ "$s" -le 1048576 ] || [ $(($(norm | tail -n "+$3" | head -c 1 | wc -c))) -eq 0 ]; then
  c=$(norm | wc -l); t=$(norm | tail -c 1 | wc -l)
  echo "N $((c)) $((t))"
else
  echo "N -"
fi
norm | tail -n "+$3" | head -n "$4" | head -c 512001
)SH";

// $1: follow (a final symlink is resolved: where a write lands) or parent (only the folders:
// what rm removes). An empty record refuses: a dangling symlink, a folder that cannot be entered.
inline constexpr std::string_view canonical_script = R"SH(mode=$1; shift
for p do
  d=${p%/*}; b=${p##*/}; rest=
  [ -n "$d" ] || d=/
  while [ ! -d "$d" ]; do rest=/${d##*/}$rest; d=${d%/*}; [ -n "$d" ] || d=/; done
  if r=$(cd -- "$d" 2>/dev/null && pwd -P); then
    r=${r%/}$rest/$b
    if [ "$mode" = follow ] && [ -L "$p" ]; then
      if [ -e "$p" ]; then r=$(readlink -f "$p" 2>/dev/null) || r=; else r=; fi
    fi
  else
    r=
  fi
  printf '%s\000' "$r"
done
)SH";

// Every script above. A command ends with at most one of them.
inline constexpr std::array<std::string_view, 6> command_scripts{ls_script,   delete_script, glob_script,
                                                                 grep_script, read_script,   canonical_script};

}  // namespace kubesandbox::files
