#!/bin/sh
# The library's Boost assertion handler must give way to a program's own: weak, in a shared
# library's dynamic symbols as in a static one. $1 is the built library.
lib=$1
case $lib in
  *.a) symbols=$(nm -C --defined-only "$lib" 2>/dev/null | grep ' boost::assertion_failed') ;;
  *) symbols=$(nm -DC --defined-only "$lib" 2>/dev/null | grep ' boost::assertion_failed') ;;
esac
[ -n "$symbols" ] || { echo "no handler found in $lib"; exit 1; }
echo "$symbols"
if echo "$symbols" | grep -v ' [Ww] boost::assertion_failed' | grep -q .; then echo "a handler is not weak"; exit 1; fi
echo ok
