# Writes the code block that follows "<!-- example:<NAME> -->" in README (up to its
# closing fence) to OUT, exactly as written. The README's examples are compiled and run
# from these copies, so the README cannot drift from what works.
#   cmake -DREADME=README.md -DNAME=c -DOUT=example.c -P tests/readme/extract.cmake
# or, while configuring, set the same variables and include() this file.
foreach(var README NAME OUT)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "extract.cmake: ${var} is not set")
  endif()
endforeach()
file(READ ${README} readme)
string(REGEX MATCH "<!-- example:${NAME} -->[\r\n]+```[a-z]*[\r\n]+(.*)" tail "${readme}")
if(NOT tail)
  message(FATAL_ERROR "${README}: no code block after <!-- example:${NAME} -->")
endif()
string(FIND "${CMAKE_MATCH_1}" "```" fence_end)
string(SUBSTRING "${CMAKE_MATCH_1}" 0 ${fence_end} block)
file(WRITE ${OUT} "${block}")
