# Layering check, run by ctest (tests/CMakeLists.txt) as
#   cmake -DSOURCE_DIR=<repo> -DGATEWAY_LINKS=<libs> -DAGENT_LINKS=<libs> -P layering_check.cmake
# The two binaries share only common/: the gateway (orchestrator/) never includes a
# replica-agent/ header nor links an agent library, the agent never the gateway's, and common/
# includes neither. Fails naming every file and line (or library) that breaks a rule.

# Comma-separated on the command line (a ';' would split ctest's arguments).
string(REPLACE "," ";" GATEWAY_LINKS "${GATEWAY_LINKS}")
string(REPLACE "," ";" AGENT_LINKS "${AGENT_LINKS}")
set(problems "")

# Every #include of a header under forbidden_dir in the sources under dir (an optional third
# argument: a regex of headers under forbidden_dir that are allowed).
function(check_includes dir forbidden_dir)
  file(GLOB_RECURSE sources
    "${SOURCE_DIR}/${dir}/*.cpp" "${SOURCE_DIR}/${dir}/*.hpp" "${SOURCE_DIR}/${dir}/*.in")
  foreach(source IN LISTS sources)
    file(STRINGS "${source}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<]${forbidden_dir}/")
    foreach(line IN LISTS lines)
      if(ARGC GREATER 2 AND line MATCHES "${ARGV2}")
        continue()
      endif()
      file(RELATIVE_PATH relative "${SOURCE_DIR}" "${source}")
      string(STRIP "${line}" line)
      list(APPEND problems "${relative}: ${line} (${dir}/ must not include ${forbidden_dir}/)")
    endforeach()
  endforeach()
  set(problems "${problems}" PARENT_SCOPE)
endfunction()

check_includes(orchestrator replica-agent)
check_includes(replica-agent orchestrator)
check_includes(common orchestrator)
check_includes(common replica-agent)

# Inside the agent, arrows point down: main -> agent/ -> (engines/, registration/, tunnel/,
# model/) -> core/ (the state they share, the small HTTP client) -> (config/, metrics/). core/
# holds the slot cache and the autotune report, so it may use those two pure engine models.
set(agent_parts agent engines registration tunnel model)
foreach(part IN ITEMS engines registration tunnel model)
  foreach(other IN LISTS agent_parts)
    if(NOT other STREQUAL part)
      check_includes(replica-agent/${part} replica-agent/${other})
    endif()
  endforeach()
endforeach()
foreach(part IN LISTS agent_parts)
  if(part STREQUAL "engines")
    check_includes(replica-agent/core replica-agent/engines "replica-agent/engines/(sim_model|autotune)\\.hpp")
  else()
    check_includes(replica-agent/core replica-agent/${part})
  endif()
  check_includes(replica-agent/config replica-agent/${part})
  check_includes(replica-agent/metrics replica-agent/${part})
endforeach()
check_includes(replica-agent/config replica-agent/core)
check_includes(replica-agent/config replica-agent/metrics)

foreach(lib IN LISTS GATEWAY_LINKS)
  if(lib MATCHES "^fg_agent")
    list(APPEND problems "fleetgate links ${lib}: the gateway must not link the agent's code")
  endif()
endforeach()
foreach(lib IN LISTS AGENT_LINKS)
  if(lib MATCHES "^fg_orchestrator" OR lib STREQUAL "fg_metrics")
    list(APPEND problems "fleetgate-agent links ${lib}: the agent must not link the gateway's code")
  endif()
endforeach()
if(NOT GATEWAY_LINKS OR NOT AGENT_LINKS)
  list(APPEND problems "no link libraries given (GATEWAY_LINKS, AGENT_LINKS)")
endif()

if(problems)
  list(JOIN problems "\n  " text)
  message(FATAL_ERROR "layering broken:\n  ${text}\nWhat both binaries need belongs in common/.")
endif()
list(LENGTH GATEWAY_LINKS gateway_count)
list(LENGTH AGENT_LINKS agent_count)
message(STATUS "layering ok (fleetgate links ${gateway_count} libraries, fleetgate-agent ${agent_count})")
