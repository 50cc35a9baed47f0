# Warnings are errors for cc's own code.
function(cc_set_warnings target)
  target_compile_options(${target} PRIVATE
    $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wcast-align
                              -Wno-missing-field-initializers -Werror
                              $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict -Wno-stringop-overflow>>)
# -Wno-restrict, -Wno-stringop-overflow: GCC 12 reports false overlaps and overflows inside
# std::string and std::vector at -O3 (GCC bugs 105329, 106199).
endfunction()
