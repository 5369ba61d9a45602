# stray_conn's --stray mode crafts rendezvous messages (a truncated hello,
# an oversize length, a wrong token): it needs the wire layout of
# comm/net/bootstrap_wire.h (types and constants only; it calls nothing
# internal). mp.stray itself is registered in tests/mp/CMakeLists.txt.
# Included by tests/mp/CMakeLists.txt.
target_include_directories(stray_conn PRIVATE ${SHARC_PRIVATE_INCLUDES})
