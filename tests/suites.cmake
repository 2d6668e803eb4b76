# How a suite becomes ctest entries. A suite of many test files is one entry per file,
# named <suite>.<part> (redis.batched, server_e2e.http), so that ctest -j runs the
# parts of every suite side by side: most of their time is spent waiting on servers and
# clocks, not computing. `ctest -R '^redis(\.|$)'` runs one suite whole; tests/README.md
# says more. Labels say which entries the sanitizer stages of the test command run:
#   sanitized: the ASan+UBSan stage (tests/run_all.sh) runs it against its build;
#   threaded:  the TSan stage runs it too (it starts threads or talks to a threaded
#              server: what ThreadSanitizer can say something about).

# ratewin_doctest_suite(<suite> <target> SOURCES <file>... [THREADED <file>...]
#                       [SANITIZED] [ENVIRONMENT <var=value>...] [TIMEOUT <s>])
# One entry per file of SOURCES, running that file's test cases only (doctest's
# --source-file filter: the file names test cases carry, in unity builds too). An entry
# whose filter finds no test case fails. Files also listed in THREADED get the threaded
# label (and sanitized).
function(ratewin_doctest_suite suite target)
  cmake_parse_arguments(arg "SANITIZED" "TIMEOUT" "SOURCES;THREADED;ENVIRONMENT" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 600)
  endif()
  foreach(source IN LISTS arg_SOURCES)
    get_filename_component(stem ${source} NAME_WE)
    string(REGEX REPLACE "_test$" "" part ${stem})
    set(name ${suite}.${part})
    add_test(NAME ${name} COMMAND ${target} --source-file=*/${source})
    set(labels ${suite})
    if(arg_SANITIZED OR source IN_LIST arg_THREADED)
      list(APPEND labels sanitized)
    endif()
    if(source IN_LIST arg_THREADED)
      list(APPEND labels threaded)
    endif()
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${arg_TIMEOUT}
                         FAIL_REGULAR_EXPRESSION "test cases: +0 \\|")
    if(arg_ENVIRONMENT)
      set_tests_properties(${name} PROPERTIES ENVIRONMENT "${arg_ENVIRONMENT}")
    endif()
  endforeach()
endfunction()

# ratewin_pytest_suite(<suite> <python> [SANITIZED] [THREADED] [ENVIRONMENT <var=value>...]
#                      [TIMEOUT <s>])
# One entry per test_*.py of this directory: <suite>.<the file's name without test_ and
# .py>, pytest on that file alone (the directory's conftest.py applies).
function(ratewin_pytest_suite suite python)
  cmake_parse_arguments(arg "SANITIZED;THREADED" "TIMEOUT" "ENVIRONMENT" ${ARGN})
  if(NOT arg_TIMEOUT)
    set(arg_TIMEOUT 600)
  endif()
  set(labels ${suite})
  if(arg_SANITIZED OR arg_THREADED)
    list(APPEND labels sanitized)
  endif()
  if(arg_THREADED)
    list(APPEND labels threaded)
  endif()
  file(GLOB files CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/test_*.py)
  foreach(file IN LISTS files)
    get_filename_component(stem ${file} NAME_WE)
    string(REGEX REPLACE "^test_" "" part ${stem})
    set(name ${suite}.${part})
    add_test(NAME ${name}
             COMMAND ${python} -m pytest -q -p no:cacheprovider ${file}
             WORKING_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR})
    set_tests_properties(${name} PROPERTIES LABELS "${labels}" TIMEOUT ${arg_TIMEOUT}
                         ENVIRONMENT "${arg_ENVIRONMENT}")
  endforeach()
endfunction()
