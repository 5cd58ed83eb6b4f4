# check_test_names.cmake — fails when two test files under tests/ share a
# file name (tests/README.md, "Naming"): a name must lead to one file.
# conftest.py is exempt (pytest requires that name in each folder).
#   cmake -DDIR=<tests dir> -P check_test_names.cmake
file(GLOB_RECURSE files RELATIVE ${DIR} ${DIR}/test_*.py ${DIR}/test_*.c ${DIR}/fuzz_*.c)
set(seen "")
set(dups "")
foreach(f ${files})
  if(f MATCHES "^fixtures/")
    continue()
  endif()
  get_filename_component(name ${f} NAME)
  list(FIND seen ${name} i)
  if(i GREATER -1)
    list(APPEND dups ${f})
  endif()
  list(APPEND seen ${name})
endforeach()
if(dups)
  message(FATAL_ERROR "test files share a name (rename one; tests/README.md, Naming): ${dups}")
endif()
