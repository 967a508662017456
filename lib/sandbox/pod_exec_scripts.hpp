// The shell scripts PodExecSandbox runs in a pod: transfers, the launcher and the kill that
// follows a timeout. Internal.
#pragma once

namespace kubesandbox::sandbox {

// Scripts run as `sh -c SCRIPT sh ARGS...`: paths travel as argv elements, never through shell
// parsing, so quotes, $, backticks, newlines and leading dashes are inert.
// Exit codes: 20 permission denied, 21 is a directory, 22 not found.
// Through a shell session (after `set -- ARGS`) the upload reads the session's input, or for
// small content a third argument; a download reads at most its second argument's count of bytes.
inline constexpr const char* upload_script = R"SH(p=$1; n=$2
case $p in */*) d=${p%/*}; [ -n "$d" ] || d=/ ;; *) d=. ;; esac
if [ ! -d "$d" ]; then
  mkdir -p -- "$d" 2>/dev/null || { [ -e "$d" ] && exit 22; exit 20; }
fi
[ -d "$p" ] && exit 21
# `true`, not `:`: a failed redirection on a special built-in would end the shell.
{ true > "$p"; } 2>/dev/null || exit 20
if [ $# -gt 2 ]; then printf %s "$3" > "$p"; exit; fi
# From a MiB on, dd in whole MiB blocks where it can fill them (GNU, busybox's usual build):
# `head -c` reads 8 KiB at a time (GNU) or a byte at a time (busybox), 2x and 6x slower.
if [ "$n" -ge 1048576 ] && dd if=/dev/null of=/dev/null iflag=fullblock status=none count=0 2>/dev/null; then
  r=$((n % 1048576))
  { dd bs=1048576 count=$((n / 1048576)) iflag=fullblock status=none &&
    { [ "$r" -eq 0 ] || dd bs="$r" count=1 iflag=fullblock status=none; }; } > "$p"
  exit
fi
exec head -c "$n" > "$p"
)SH";

inline constexpr const char* download_script = R"SH(p=$1
[ -d "$p" ] && exit 21
[ -e "$p" ] || exit 22
[ -r "$p" ] || exit 20
[ $# -gt 1 ] && exec head -c "$2" < "$p"
exec cat -- "$p"
)SH";

// Every command given as argv runs under this launcher: it marks its environment (inherited by
// everything the command starts), enters the working directory and, when it does not lead a
// process group already, starts a session of its own (setsid without forking: util-linux and
// busybox agree there), so a timeout can kill the command's whole process group.
inline constexpr const char* launch_script = R"SH(KUBESANDBOX_EXEC=$1; export KUBESANDBOX_EXEC
if [ -n "$2" ]; then cd -- "$2" || exit 1; fi
shift 2
if read -r _ _ _ _ pg _ < /proc/$$/stat 2>/dev/null && [ "$pg" != "$$" ] && command -v setsid >/dev/null 2>&1; then
  exec setsid "$@"
fi
exec "$@"
)SH";

// Kills what a timed-out command left running: processes carrying its marker (in their
// environment, or for the shell that runs a shell command, at the start of its script), their descendants
// (which may have cleared their environment) and the process groups the marked processes lead.
// Several passes catch children forked meanwhile; groups are matched against every group leader
// marked in any pass, since a child forked just before its marked parent was killed carries no
// marker when it cleared its environment, and its parent is pid 1 by the next pass. (A group's id
// is not reused while the group has a member.) Zombies are passed over (already dead, and no
// longer a sign that anything is left) unless other threads of theirs still run. Never touches
// PID 1 or its own group.
// For a command run by a shell session, $2 is the session's driver and $3 its token (the driver
// is used only if one of its arguments is still the token): the driver is spared, its child is
// the command's shell (or, once that ended, the subshell forked for the next command, which a
// timed-out session never runs), and a child that leads a process group of its own is the
// command's group. When $4 is 1 the command shares the driver's process group, as its processes
// would share an exec's: the group's members are killed too, except those there before the
// command's shell started and their descendants. The driver forks that shell as the previous
// command ends, so an orphan that what earlier commands left running starts while the session
// is idle counts as the command's. Start times are in clock ticks; within one tick the lower pid
// came first.
inline constexpr const char* kill_script = R"SH(m="KUBESANDBOX_EXEC=$1"
root=$2 rootgroup=
if [ -n "$root" ] && ! tr '\000' '\n' 2>/dev/null < "/proc/$root/cmdline" | grep -qxF -- "$3"; then root=; fi
[ -n "$root" ] && [ "$4" = 1 ] && rootgroup=$root
self=$$
read -r _ _ _ _ selfpg _ < /proc/$self/stat 2>/dev/null
leaders= t0= p0=
for pass in 1 2 3 4 5; do
  marked= stats=
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    [ "$p" = "$self" ] && continue
    [ "$p" = 1 ] && continue
    [ "$p" = "$root" ] && continue
    s=$(cat "$d/stat" 2>/dev/null) || continue
    s=${s##*) }
    set -- $s
    [ "$1" = Z ] && [ "${18}" = 1 ] && continue
    stats="$stats $p:$2:$3:${20}"
    if [ -n "$root" ] && [ "$2" = "$root" ]; then
      [ -z "$t0" ] && t0=${20} p0=$p
      [ "$p" = "$3" ] && leaders="$leaders $p"
    fi
    if tr '\000' '\n' 2>/dev/null < "$d/environ" | grep -qxF -- "$m" ||
       tr '\000' '\n' 2>/dev/null < "$d/cmdline" | grep -q -- "^$m; export KUBESANDBOX_EXEC; "; then
      marked="$marked $p"
      [ "$p" = "$3" ] && leaders="$leaders $p"
    fi
  done
  spared= group=
  if [ -n "$rootgroup" ] && [ -n "$t0" ]; then
    group=$rootgroup
    for e in $stats; do
      p=${e%%:*}; r=${e#*:}; r=${r#*:}; pg=${r%%:*}; st=${r#*:}
      [ "$pg" = "$rootgroup" ] || continue
      if [ "$st" -lt "$t0" ] || { [ "$st" = "$t0" ] && [ "$p" -lt "$p0" ]; }; then spared="$spared $p"; fi
    done
    changed=1
    while [ -n "$changed" ]; do
      changed=
      for e in $stats; do
        p=${e%%:*}; r=${e#*:}; pp=${r%%:*}
        case " $spared " in *" $p "*) continue ;; esac
        case " $spared " in *" $pp "*) spared="$spared $p"; changed=1 ;; esac
      done
    done
  fi
  [ -n "$marked$leaders$group" ] || break
  victims=$marked
  changed=1
  while [ -n "$changed" ]; do
    changed=
    for e in $stats; do
      p=${e%%:*}; r=${e#*:}; pp=${r%%:*}; r=${r#*:}; pg=${r%%:*}
      case " $victims $spared " in *" $p "*) continue ;; esac
      case " $victims $root " in *" $pp "*) victims="$victims $p"; changed=1; continue ;; esac
      [ "$pg" = "$selfpg" ] && continue
      case " $leaders $group " in *" $pg "*) victims="$victims $p"; changed=1 ;; esac
    done
  done
  [ -n "$victims" ] || break
  for p in $victims; do kill -9 "$p" 2>/dev/null; done
done
exit 0
)SH";

}  // namespace kubesandbox::sandbox
