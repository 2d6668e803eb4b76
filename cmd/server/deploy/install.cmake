# Run by `cmake --install` (component server) with the install's own prefix: puts the
# server's configuration and its systemd unit in place, for that prefix, and its --help
# text in share/doc/ratewin-server. Configuration
# goes where GNUInstallDirs puts it: /etc for the /usr prefix (the Debian packages), else
# <prefix>/etc. DESTDIR is honoured (file(INSTALL) adds it).
#
# An existing rules file or environment file is kept: they are the operator's, and a
# reinstall over them writes the shipped version beside them (*.dist). (The packages list
# them as conffiles, so dpkg asks instead.)
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr")
  set(etc /etc)
else()
  set(etc ${CMAKE_INSTALL_PREFIX}/etc)
endif()
set(RATEWIN_SERVER_BIN ${CMAKE_INSTALL_PREFIX}/${ratewin_bindir}/ratewin-server)
set(RATEWIN_RULES_FILE ${etc}/ratewin/rules.yaml)
set(RATEWIN_ENV_FILE ${etc}/default/ratewin-server)

function(ratewin_install_config source target)
  get_filename_component(dir ${target} DIRECTORY)
  get_filename_component(name ${target} NAME)
  if(EXISTS "$ENV{DESTDIR}${target}")
    message(STATUS "Keeping: $ENV{DESTDIR}${target} (the shipped one: ${name}.dist)")
    set(name ${name}.dist)
  endif()
  file(INSTALL ${source} DESTINATION ${dir} RENAME ${name})
endfunction()
ratewin_install_config(${ratewin_deploy_dir}/rules.example.yaml ${RATEWIN_RULES_FILE})
ratewin_install_config(${ratewin_deploy_dir}/deploy/ratewin-server.env ${RATEWIN_ENV_FILE})

# (Made in a folder of its own per prefix and staging root: installs may run side by side,
# as the packages test and the install test do.)
string(MD5 unit_dir "${CMAKE_INSTALL_PREFIX}|$ENV{DESTDIR}")
set(unit ${ratewin_work_dir}/installed-units/${unit_dir}/ratewin-server.service)
configure_file(${ratewin_deploy_dir}/deploy/ratewin-server.service.in ${unit} @ONLY)
file(INSTALL ${unit} DESTINATION ${CMAKE_INSTALL_PREFIX}/lib/systemd/system)

# The server's --help text (every option, every URL form), as the installed server prints
# it, in the package's documentation folder.
set(help ${ratewin_work_dir}/installed-units/${unit_dir}/ratewin-server.help.txt)
execute_process(COMMAND "$ENV{DESTDIR}${RATEWIN_SERVER_BIN}" --help OUTPUT_FILE ${help}
                RESULT_VARIABLE help_result)
if(NOT help_result EQUAL 0)
  message(FATAL_ERROR "ratewin-server --help failed (${help_result})")
endif()
file(INSTALL ${help} DESTINATION ${CMAKE_INSTALL_PREFIX}/share/doc/ratewin-server)
