# Writes version_info.h (cmake -P, at every build): the commit the sources are at, "-dirty" when tracked files
# differ from it, "unknown" outside a git checkout. configure_file rewrites only on change: no needless rebuilds.
execute_process(COMMAND git rev-parse --short=12 HEAD WORKING_DIRECTORY "${SRC}"
                OUTPUT_VARIABLE TRAINER_GIT_SHA OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
if(NOT TRAINER_GIT_SHA)
  set(TRAINER_GIT_SHA "unknown")
else()
  execute_process(COMMAND git status --porcelain --untracked-files=no WORKING_DIRECTORY "${SRC}"
                  OUTPUT_VARIABLE _dirty OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(_dirty)
    string(APPEND TRAINER_GIT_SHA "-dirty")
  endif()
endif()
configure_file("${IN}" "${OUT}" @ONLY)
